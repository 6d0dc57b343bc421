#!/bin/sh
# The build steps master/Dockerfile and worker/Dockerfile share, run in /src
# (the package sources the Dockerfile copied there), which it removes after:
#   sh install.sh .             # the master: base install only
#   sh install.sh '.[worker]'   # the worker: with TensorFlow, NNI, ...
set -eu
target="$1"

# A fixed numeric UID so Kubernetes' runAsNonRoot can verify it without /etc/passwd.
groupadd --system --gid 10001 aiperf
useradd --system --uid 10001 --gid 10001 --home-dir /home/aiperf --create-home \
    --shell /usr/sbin/nologin aiperf
install -d -o 10001 -g 10001 /var/lib/aiperf

# Keep the base image's TensorFlow, Keras and NumPy (the worker's are built
# against its CUDA): pin them as constraints so the install cannot replace them.
# The master's base image has none of them, so nothing is pinned there.
constraints=/tmp/base-constraints.txt
{ python3 -m pip freeze | grep -iE '^(tensorflow|keras|numpy)==' || true; } > "$constraints"
PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_BREAK_SYSTEM_PACKAGES=1 \
    python3 -m pip install --constraint "$constraints" "$target"
rm -rf /src "$constraints"
