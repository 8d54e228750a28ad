//! Dev helper: the device timeline of a fast fixture (default profile or
//! `NPU_SIM_PROFILE`): the last N commands to complete, with engine, issue,
//! fixed-phase start/end, data start and completion.
//!   cargo run --release --example timeline [qkv|ao|ff] [N]
use npu_device::profile::Profile;
use npu_device::sim::{Ctx, Mode};
use npu::Shape;

#[allow(dead_code)]
#[path = "../../fixtures/fast.rs"]
mod fast;
#[allow(dead_code)]
#[path = "../../fixtures/attention_output_fast.rs"]
mod ao_fast;
#[allow(dead_code)]
#[path = "../../fixtures/feedforward_fast.rs"]
mod ff_fast;

fn main() {
    let a: Vec<String> = std::env::args().collect();
    let which = a.get(1).map(|s| s.as_str()).unwrap_or("ao");
    let n: usize = a.get(2).and_then(|s| s.parse().ok()).unwrap_or(60);
    let p = Profile::from_env().unwrap();
    // fixture parameters from the environment, e.g. AO_NSL=16 AO_ROWS=24
    use std::sync::atomic::Ordering::Relaxed;
    for (v, a) in [("AO_NSL", &ao_fast::P_NSL), ("AO_ROWS", &ao_fast::P_ROWS), ("AO_LAST", &ao_fast::P_LAST), ("AO_NB", &ao_fast::P_NB), ("AO_POOL", &ao_fast::P_POOL), ("AO_FMIN", &ao_fast::P_FMIN)] {
        if let Some(x) = std::env::var(v).ok().and_then(|x| x.parse().ok()) {
            a.store(x, Relaxed);
        }
    }
    let (k, f) = match which {
        "qkv" => fast::__npu_kernels()[0],
        "ff" => ff_fast::__npu_kernels()[0],
        _ => ao_fast::__npu_kernels()[0],
    };
    let prog = npu::host::record(npu_device::runtime::launch_for(k, Shape::default(), &p, 1), &f);
    let mut ctx = Ctx::new(Mode::Trace, p.clone(), k, Shape::default(), 1);
    npu_device::runtime::replay(&mut ctx, &prog);
    let end = ctx.dev.finish();
    let nd = p.clusters as usize * p.engines_per_cluster();
    let ns = p.slices();
    let name = |e: usize| -> String {
        if e < nd {
            format!("dma{}.{}", e / p.engines_per_cluster(), e % p.engines_per_cluster())
        } else if e < nd + ns {
            format!("tu{}", e - nd)
        } else if e < nd + 2 * ns {
            format!("vec{}", e - nd - ns)
        } else {
            format!("sw{}", e - nd - 2 * ns)
        }
    };
    let tl = ctx.dev.timeline();
    let mut ids: Vec<usize> = (0..tl.len()).collect();
    ids.sort_by(|&x, &y| tl[x].3.partial_cmp(&tl[y].3).unwrap());
    let min = npu_device::refk::weight_bytes(k, &Shape::default()) as f64 / p.hbm_sustained_bytes_per_cycle;
    println!("{} end {:.0} min {:.0} ratio {:.4} commands {} diags {}", k, end, min, end / min, tl.len(), ctx.diags.len());
    for d in ctx.diags.iter().take(5) {
        println!("  {} {} {:?}", d.code, d.msg, d.span.as_ref().map(|s| s.line));
    }
    // HBM-pool bytes (DMA engines) per 500-cycle window of data phases
    let mut win = vec![0f64; (end / 500.0) as usize + 1];
    for i in 0..tl.len() {
        if tl[i].0 < nd {
            let (_, da) = ctx.dev.phases(i);
            let (a, b, by) = (da, tl[i].3, ctx.dev.bytes(i));
            if by > 0.0 && b > a {
                let mut t = a;
                while t < b {
                    let w = (t / 500.0) as usize;
                    let e = ((w + 1) as f64 * 500.0).min(b);
                    win[w] += by * (e - t) / (b - a);
                    t = e;
                }
            }
        }
    }
    let tot: f64 = (0..tl.len()).filter(|&i| tl[i].0 < nd).map(|i| ctx.dev.bytes(i)).sum();
    println!("DMA bytes {:.0}; per-cycle rate by 500-cycle window: {}", tot, win.iter().map(|b| format!("{:.0}", b / 500.0)).collect::<Vec<_>>().join(" "));
    for &i in ids.iter().skip(ids.len().saturating_sub(n)) {
        let (e, iss, st, dn) = tl[i];
        let (rd, da) = ctx.dev.phases(i);
        println!("#{:5} {:8} {:8.0}B issue {:8.0} start {:8.0} ready {:8.0} data {:8.0} done {:8.0}", i, name(e), ctx.dev.bytes(i), iss, st, rd, da, dn);
    }
}
