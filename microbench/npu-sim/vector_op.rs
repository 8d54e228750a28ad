// Probe: ${ops} vector adds back to back on slice 0, each over ${elems} f32 elements.
// Measures the vector engine: cycles = base + ops * (op_cost + elems / elems_per_cycle).
use npu::*;

fn probe(k: &mut Ctx) {
    let (ops, elems): (u32, u32) = (${ops}, ${elems});
    let a = k.vrf_alloc(0, elems);
    let b = k.vrf_alloc(0, elems);
    let c = k.vrf_alloc(0, elems);
    let mut last = None;
    for _ in 0..ops {
        last = Some(k.vadd(a, b, c));
    }
    k.wait(last.unwrap());
}
npu::kernels! { ${kernel} => probe }
