#!/usr/bin/env bash
# The main command: installs missing dependencies (apt-get, needs root), builds ctc,
# then compiles the seed CNN to C and runs it on the Fashion-MNIST test set,
# comparing with PyTorch (see examples/fashion_mnist_demo.py).
set -euo pipefail
cd "$(dirname "$0")"
scripts/install-deps.sh
ninja
exec /usr/bin/python3 examples/fashion_mnist_demo.py "$@"
