// Probe: ${copies} switch-network copies back to back of ${bytes} bytes from slice 0's DM to
// slice 1's. Measures the switch: cycles / copies = startup + bytes / bandwidth.
use npu::*;

fn probe(k: &mut Ctx) {
    let (bytes, copies): (u32, u32) = (${bytes}, ${copies});
    let src = k.dm_alloc(0, bytes);
    let dst = k.dm_alloc(1, bytes);
    let mut last = None;
    for _ in 0..copies {
        last = Some(k.switch_copy(src.at(0), dst.at(0), bytes));
    }
    k.wait(last.unwrap());
}
npu::kernels! { ${kernel} => probe }
