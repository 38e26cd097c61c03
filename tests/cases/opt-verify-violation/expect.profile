victim 0 0
(violations) 1 0
violation: prog: ADDR (o_victim+0x3), inside the DCR of the probe at ADDR: 1 hits
