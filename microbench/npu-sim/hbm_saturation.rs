// Probe: ${engines} DMA engines at once (spread over the clusters), each moving ${bytes} bytes
// from HBM into its own DM buffer in ${packet}-byte packets, one command each. Measures the
// aggregate HBM bandwidth against the number of engines in use (it saturates).
use npu::*;

fn probe(k: &mut Ctx) {
    let (engines, bytes, packet): (usize, u64, u32) = (${engines}, ${bytes}, ${packet});
    let hw = k.hw();
    let buffer: u32 = 65536;
    let outer = (bytes / buffer as u64) as u32;
    let src = k.hbm_alloc(buffer as u64);
    let mut tokens = vec![];
    for idx in 0..engines {
        let cluster = idx % hw.clusters;
        let index = idx / hw.clusters;
        let slice = cluster * hw.slices_per_cluster + index % hw.slices_per_cluster;
        let dst = k.dm_alloc(slice, buffer);
        let seq = [lp(outer, 0, 0), lp(buffer / packet, packet as i64, packet as i64)];
        tokens.push(k.dma(engine(cluster, index), src.at(0), dst.at(0), packet, &seq));
    }
    k.wait_all(tokens);
}
npu::kernels! { ${kernel} => probe }
