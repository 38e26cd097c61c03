cpy 100 0
cpy32 100 0
cpycc 100 0
spin 100 0
pcpy 100 0
pcpy32 100 0
maybe 100 0
again 1850 0
