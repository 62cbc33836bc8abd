# Sourced first by every device script: the carried wheels ($WHL, default .whl; none with
# SKIP_WHEELS=1) installed into /tmp/site, which goes on PYTHONPATH with the repository ($REPO).
# The device has no package registry; scripts/gpu_wheels.sh builds the wheels here.
# The tree travels only under 64 MiB: with the newest report's raw runs it does not; scripts/park_runs.sh.
export PYTHONUNBUFFERED=1
REPO=${REPO:-$PWD}
if [ -z "${SKIP_WHEELS:-}" ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
    ${WHL:-.whl}/*.whl || exit 1
fi
export PYTHONPATH=/tmp/site:$REPO
