# alternative chip A: slow DMA startup, narrow engines, many of them, cheap passes
dma_startup_cycles = 1500
dma_engine_bytes_per_cycle = 128
dma_engines_per_cluster = 12
hbm_sustained_bytes_per_cycle = 1100
pass_issue_cycles = 250
switch_bytes_per_cycle = 60
dma_packet_overhead_cycles = 8
