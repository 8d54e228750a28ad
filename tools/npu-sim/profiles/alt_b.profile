# alternative chip B: fast startup, wide engines, few of them, expensive passes
dma_startup_cycles = 150
dma_engine_bytes_per_cycle = 512
dma_engines_per_cluster = 4
hbm_sustained_bytes_per_cycle = 1500
pass_issue_cycles = 1500
switch_bytes_per_cycle = 16
bank_conflict_penalty = 12
unaligned_write_penalty = 80
