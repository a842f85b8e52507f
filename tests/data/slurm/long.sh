#!/bin/bash
echo "training started"; for i in $(seq 1 600); do echo "step $i"; sleep 1; done
