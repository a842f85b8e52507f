#!/bin/bash
echo "starting data prep"
./throw
