#!/bin/bash
# A job script whose training binary was never built.
echo "starting job on $(hostname -s)"
./build/train_cuda --config configs/base.yaml
