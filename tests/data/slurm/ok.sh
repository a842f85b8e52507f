#!/bin/bash
echo "step 1"; sleep 1; echo "finished"
