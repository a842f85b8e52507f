#!/bin/bash
echo "allocating"
python3 -c "
import time
blocks=[]
for i in range(400):
    blocks.append(bytearray(10*1024*1024))
    if i % 10 == 0: print('allocated', (i+1)*10, 'MiB', flush=True)
    time.sleep(0.01)
print('done')
"
