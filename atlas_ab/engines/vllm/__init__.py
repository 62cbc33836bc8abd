"""vLLM in the loop: our checkpoints exported into a layout vLLM serves with its own MTP drafting
(`export`), its OpenAI server started, health-checked and stopped (`server`), and the command line
(`python -m atlas_ab.engines.vllm`). The engine lives in its own virtual environment
(scripts/setup_vllm.sh); nothing here imports vllm."""
