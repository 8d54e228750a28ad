use npu_device::num::*;
use npu_device::profile::Profile;
use npu_device::runtime::{exec, trace};
use npu::*;

#[path = "../../../../dsl_templates/npu-sim/baseline_attention_output.rs"]
mod bao;
#[path = "../../../../dsl_templates/npu-sim/baseline_feedforward.rs"]
mod bff;
#[path = "../../../../dsl_templates/npu-sim/baseline_project_qkv.rs"]
mod bqkv;

#[test]
fn fp8_table() {
    let t: &[(u8, f32)] = &[(0x00, 0.0), (0x01, 1.0 / 512.0), (0x07, 7.0 / 512.0), (0x08, 1.0 / 64.0), (0x38, 1.0), (0x39, 1.125), (0x40, 2.0), (0x7E, 448.0), (0xC0, -2.0), (0xB8, -1.0)];
    for &(b, v) in t {
        assert_eq!(fp8_to_f32(b), v, "decode {:#x}", b);
        assert_eq!(f32_to_fp8(v), b, "encode {}", v);
    }
    assert!(fp8_to_f32(0x7F).is_nan());
    for b in 0..=255u8 {
        let v = fp8_to_f32(b);
        if v.is_nan() || (b == 0x80) {
            continue;
        }
        assert_eq!(f32_to_fp8(v), b, "roundtrip {:#x}", b);
    }
    assert_eq!(f32_to_fp8(1.0625), 0x38); // tie → even mantissa
    assert_eq!(f32_to_fp8(1.1875), 0x3A); // tie 1.125|1.25 → even (1.25)
    assert_eq!(f32_to_fp8(1000.0), 0x7E); // saturate
}

#[test]
fn fp4_table() {
    let vals = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0];
    for i in 0..8u8 {
        assert_eq!(fp4_to_f32(i), vals[i as usize]);
        assert_eq!(fp4_to_f32(i | 8), -vals[i as usize]);
        assert_eq!(f32_to_fp4(vals[i as usize]), i);
    }
    assert_eq!(f32_to_fp4(2.5), 4); // tie → even code (2.0)
    assert_eq!(f32_to_fp4(5.0), 6); // tie 4|6 → even code (4.0)
    assert_eq!(f32_to_fp4(100.0), 7);
}

#[test]
fn bf16_rne() {
    assert_eq!(f32_to_bf16(1.0), 0x3F80);
    assert_eq!(f32_to_bf16(1.00390625), 0x3F80); // halfway → even
    assert_eq!(f32_to_bf16(1.01171875), 0x3F82); // halfway → even (up)
    assert_eq!(f32_to_bf16(-2.0), 0xC000);
    assert!(bf16_to_f32(f32_to_bf16(f32::NAN)).is_nan());
    assert_eq!(round_bf16(3.14159265), 3.140625);
}

fn p() -> Profile {
    Profile::default()
}

#[test]
fn baselines_pass_and_fail_when_broken() {
    for (k, f) in [("attention_output", bao::__npu_kernels()[0].1), ("project_qkv", bqkv::__npu_kernels()[0].1), ("feedforward", bff::__npu_kernels()[0].1)] {
        let r = exec(k, Shape::default(), &p(), 11, true, true, &f);
        assert!(r.trace.diags.is_empty(), "{}: {:?}", k, r.trace.diags);
        let v = r.verify.unwrap();
        assert!(v.passed, "{} failed verification: {:?}", k, v);
    }
    // a kernel that writes nothing fails (poisoned outputs)
    let r = exec("attention_output", Shape::default(), &p(), 11, true, true, &|_k: &mut Ctx| {});
    assert!(!r.verify.unwrap().passed);
    // with stale outputs of seed 0 it passes only for seed 0
    let r = exec("attention_output", Shape::default(), &p(), 0, true, false, &|_k: &mut Ctx| {});
    assert!(r.verify.unwrap().passed);
    let r = exec("attention_output", Shape::default(), &p(), 5, true, false, &|_k: &mut Ctx| {});
    assert!(!r.verify.unwrap().passed);
}

fn cyc(f: &dyn Fn(&mut Ctx)) -> f64 {
    let t = trace("attention_output", Shape::default(), &p(), f);
    assert!(t.diags.is_empty(), "{:?}", t.diags);
    t.dev_cycles
}
fn codes(f: &dyn Fn(&mut Ctx)) -> Vec<&'static str> {
    trace("attention_output", Shape::default(), &p(), f).diags.iter().map(|d| d.code).collect()
}

const MB: u32 = 1 << 20;

#[test]
fn effect_dma_startup_and_packets() {
    let one = cyc(&|k| {
        let w = k.tensor("wo");
        let d = k.dm_alloc(0, 256 * 1024);
        let t = k.copy(engine(0, 0), w.at(0), d.at(0), 256 * 1024, 4096);
        k.wait(t);
    });
    let many = cyc(&|k| {
        let w = k.tensor("wo");
        let d = k.dm_alloc(0, 256 * 1024);
        for i in 0..64u32 {
            let t = k.copy(engine(0, 0), w.at(i as u64 * 4096), d.at(i * 4096), 4096, 4096);
            k.wait(t);
        }
    });
    let small = cyc(&|k| {
        let w = k.tensor("wo");
        let d = k.dm_alloc(0, 256 * 1024);
        let t = k.copy(engine(0, 0), w.at(0), d.at(0), 256 * 1024, 256);
        k.wait(t);
    });
    assert!(many > one * 2.0, "startup: {} vs {}", many, one);
    assert!(small > one * 1.5, "packets: {} vs {}", small, one);
}

#[test]
fn effect_engines_and_sustained_cap() {
    let run = |n: usize| {
        cyc(&move |k: &mut Ctx| {
            let w = k.tensor("wo");
            let per = 8 * MB / n as u32;
            let mut ts = vec![];
            for i in 0..n {
                let sl = i % 16;
                let d = k.dm_alloc(sl, 4096);
                // stream `per` bytes through one 4 KB DM buffer
                ts.push(k.dma(engine(sl / 8, sl % 8), w.at(i as u64 * per as u64), d.at(0), 4096, &[lp(per / 4096, 4096, 0)]));
            }
            k.wait_all(ts);
        })
    };
    let c1 = run(1);
    let c16 = run(16);
    assert!(c16 < c1 / 4.0, "engines: {} vs {}", c16, c1);
    // 16 engines could do 16*256 B/cycle but the sustained cap holds them to ~1400
    assert!(c16 > (8 * MB) as f64 / 1400.0, "sustained cap: {}", c16);
}

#[test]
fn effect_unaligned_write_and_bank_conflicts() {
    let wr = |off: u64| {
        cyc(&move |k: &mut Ctx| {
            let o = k.tensor("out");
            let d = k.dm_alloc(0, 8192);
            let t = k.copy(engine(0, 0), d.at(0), o.at(off), 1024, 1024);
            k.wait(t);
        })
    };
    assert!(wr(2) > wr(0) * 1.5, "unaligned {} vs {}", wr(2), wr(0));
    let banks = |stride: i64, n: u32| {
        trace("attention_output", Shape::default(), &p(), &move |k: &mut Ctx| {
            let w = k.tensor("wo");
            let d = k.dm_alloc(0, 256 * 1024);
            let t = k.dma(engine(0, 0), w.at(0), d.at(0), 256, &[lp(n, 256, stride)]);
            k.wait(t);
        })
    };
    let good = banks(256, 32);
    let bad = banks(1024, 32);
    assert!(bad.dev_cycles > good.dev_cycles * 5.0, "{} vs {}", bad.dev_cycles, good.dev_cycles);
    assert!(!bad.hang && bad.diags.is_empty());
    let hang = banks(1024, 64);
    assert!(hang.hang && hang.diags.is_empty(), "64 same-bank packets hang, check does not see it");
}

#[test]
fn effect_pass_issue_overlap_switch() {
    let passes = |rows: u32| {
        cyc(&move |k: &mut Ctx| {
            let d = k.dm_alloc(0, 64 * 1024);
            let x = k.trf_alloc(0, 1024);
            let acc = k.vrf_alloc(0, 64);
            for r in (0..64).step_by(rows as usize) {
                let t = k.pass(&Pass { slice: 0, w: Tile { addr: d.addr + r * 1024, rows, cols: 1024, pitch: 1024, dt: Dt::Fp8E4m3 }, scales: None, x, acc: acc.sub(r, rows), accumulate: false });
                k.wait(t);
            }
        })
    };
    assert!(passes(8) > passes(64) * 3.0);
    // overlap: DMA on slice 0 and pass on slice 1 concurrently vs serialised
    let ov = |serial: bool| {
        cyc(&move |k: &mut Ctx| {
            let w = k.tensor("wo");
            let d0 = k.dm_alloc(0, 256 * 1024);
            let d1 = k.dm_alloc(1, 64 * 1024);
            let x = k.trf_alloc(1, 1024);
            let acc = k.vrf_alloc(1, 64);
            let t1 = k.copy(engine(0, 0), w.at(0), d0.at(0), 256 * 1024, 4096);
            if serial {
                k.wait(t1);
                let t2 = k.pass(&Pass { slice: 1, w: Tile { addr: d1.addr, rows: 64, cols: 1024, pitch: 1024, dt: Dt::Fp8E4m3 }, scales: None, x, acc, accumulate: false });
                k.wait(t2);
            } else {
                let t2 = k.pass(&Pass { slice: 1, w: Tile { addr: d1.addr, rows: 64, cols: 1024, pitch: 1024, dt: Dt::Fp8E4m3 }, scales: None, x, acc, accumulate: false });
                k.wait(t1);
                k.wait(t2);
            }
        })
    };
    assert!(ov(false) < ov(true));
    // switch network is much slower than HBM for the same bytes
    let sw = cyc(&|k| {
        let a = k.dm_alloc(0, 65536);
        let b = k.dm_alloc(9, 65536);
        let t = k.switch_copy(a.at(0), b.at(0), 65536);
        k.wait(t);
    });
    let hb = cyc(&|k| {
        let w = k.tensor("wo");
        let b = k.dm_alloc(9, 65536);
        let t = k.copy(engine(1, 0), w.at(0), b.at(0), 65536, 4096);
        k.wait(t);
    });
    assert!(sw > hb * 3.0, "switch {} vs hbm {}", sw, hb);
}

#[test]
fn diagnostics() {
    assert_eq!(codes(&|k| { k.dm_alloc(0, 600 * 1024); }), vec!["E0201"]);
    assert_eq!(codes(&|k| { k.trf_alloc(0, 5000); }), vec!["E0202"]);
    assert_eq!(codes(&|k| { k.vrf_alloc(0, 3000); }), vec!["E0203"]);
    let w = |packet: u32, seq: Vec<Loop>, src_off: u64| {
        move |k: &mut Ctx| {
            let t = k.tensor("wo");
            let d = k.dm_alloc(0, 512 * 1024);
            let tk = k.dma(engine(0, 0), t.at(src_off), d.at(0), packet, &seq);
            k.wait(tk);
        }
    };
    assert_eq!(codes(&w(8192, vec![lp(1, 0, 0)], 0)), vec!["E0101"]);
    assert_eq!(codes(&w(256, vec![lp(1, 0, 0); 9], 0)), vec!["E0102"]);
    assert_eq!(codes(&w(4, vec![lp(70000, 0, 0)], 0)), vec!["E0103"]);
    assert_eq!(codes(&w(256, vec![lp(2, 256, 256)], 128)), vec!["E0104"]);
    assert_eq!(codes(&w(4096, vec![lp(200, 4096, 4096)], 0)), vec!["E0105"]);
    assert_eq!(codes(&|k| { let t = k.tensor("wo"); let d = k.dm_alloc(0, 4096); let tk = k.copy(engine(0, 9), t.at(0), d.at(0), 4096, 4096); k.wait(tk); }), vec!["E0106"]);
    assert_eq!(codes(&|k| { let t = k.tensor("wo"); let d = k.dm_alloc(9, 4096); let tk = k.copy(engine(0, 0), t.at(0), d.at(0), 4096, 4096); k.wait(tk); }), vec!["E0107"]);
    assert_eq!(
        codes(&|k| {
            let t = k.tensor("wo");
            let d = k.dm_alloc(0, 4096);
            let v = k.vrf_alloc(0, 1024);
            let t1 = k.copy(engine(0, 0), t.at(0), d.at(0), 4096, 4096);
            let t2 = k.vload(d.at(0), Dt::Bf16, v); // no wait on t1
            k.wait(t1);
            k.wait(t2);
        }),
        vec!["E0108"]
    );
    assert_eq!(codes(&|k| { let t = k.tensor("wo"); let d = k.dm_alloc(0, 4096); let _ = k.copy(engine(0, 0), t.at(0), d.at(0), 4096, 4096); }), vec!["E0109"]);
    assert_eq!(codes(&|k| { let t = k.tensor("wo"); let d = k.dm_alloc(0, 4096); let tk = k.copy(engine(0, 0), d.at(0), t.at(0), 4096, 4096); k.wait(tk); }), vec!["E0110"]);
    let pass = |rows: u32, cols: u32, addr_off: u32| {
        move |k: &mut Ctx| {
            let d = k.dm_alloc(0, 64 * 1024);
            let x = k.trf_alloc(0, cols);
            let acc = k.vrf_alloc(0, rows);
            let t = k.pass(&Pass { slice: 0, w: Tile { addr: d.addr + addr_off, rows, cols, pitch: cols, dt: Dt::Fp8E4m3 }, scales: None, x, acc, accumulate: false });
            k.wait(t);
        }
    };
    assert_eq!(codes(&pass(12, 128, 0)), vec!["E0301"]);
    assert_eq!(codes(&pass(8, 100, 0)), vec!["E0302"]);
    assert_eq!(codes(&pass(8, 128, 32)), vec!["E0306"]);
    assert_eq!(codes(&|k| { k.tensor("nope"); }), vec!["E0404"]);
    assert_eq!(codes(&|_k| { let v: Vec<u32> = vec![]; let _ = v[3]; }), vec!["E0403"]);
}

#[test]
fn static_estimate_is_biased_low() {
    let f = bff::__npu_kernels()[0].1;
    let t = trace("feedforward", Shape::default(), &p(), &f);
    assert!(t.est_cycles < t.dev_cycles);
}

/// `after`: a command issued early behind a device-side dependency hides its
/// fixed cost (pass issue, DMA startup); issuing it after a host wait pays it.
/// The dependency also makes touching the producer's memory legal, and
/// waiting on the consumer retires the producer.
#[test]
fn effect_after_overlaps_fixed_costs() {
    let run = |early: bool| {
        let f = move |k: &mut Ctx| {
            let w = k.tensor("wo");
            let out = k.tensor("out");
            let d = k.dm_alloc(0, 64 * 1024);
            let o = k.dm_alloc(0, 4096);
            let x = k.trf_alloc(0, 1024);
            let acc = k.vrf_alloc(0, 64);
            let t1 = k.copy(engine(0, 0), w.at(0), d.at(0), 64 * 1024, 4096);
            let pass = Pass { slice: 0, w: Tile { addr: d.addr, rows: 64, cols: 1024, pitch: 1024, dt: Dt::Fp8E4m3 }, scales: None, x, acc, accumulate: false };
            if early {
                let t2 = k.after(&[&t1]).pass(&pass);
                let t3 = k.after(&[&t2]).vstore(acc, o.at(0), Dt::F32);
                let t4 = k.after(&[&t3]).copy(engine(0, 1), o.at(0), out.at(0), 256, 256);
                k.wait(t4);
                k.wait(t3);
            } else {
                k.wait(t1);
                let t2 = k.pass(&pass);
                k.wait(t2);
                let t3 = k.vstore(acc, o.at(0), Dt::F32);
                k.wait(t3);
                let t4 = k.copy(engine(0, 1), o.at(0), out.at(0), 256, 256);
                k.wait(t4);
            }
        };
        let t = trace("attention_output", Shape::default(), &p(), &f);
        assert!(t.diags.is_empty(), "early={}: {:?}", early, t.diags);
        (t.dev_cycles, t.est_cycles)
    };
    let (de, ee) = run(true);
    let (ds, es) = run(false);
    let (pi, st) = (p().pass_issue_cycles, p().dma_startup_cycles);
    assert!(ds - de > 0.9 * (pi + st), "early {} vs serial {}", de, ds);
    assert!(es - ee > 0.9 * (pi + st), "estimate: early {} vs serial {}", ee, es);
    // without `after`, the same early issue is a hazard
    let c = codes(&|k: &mut Ctx| {
        let w = k.tensor("wo");
        let d = k.dm_alloc(0, 64 * 1024);
        let x = k.trf_alloc(0, 1024);
        let acc = k.vrf_alloc(0, 64);
        let t1 = k.copy(engine(0, 0), w.at(0), d.at(0), 64 * 1024, 4096);
        let t2 = k.pass(&Pass { slice: 0, w: Tile { addr: d.addr, rows: 64, cols: 1024, pitch: 1024, dt: Dt::Fp8E4m3 }, scales: None, x, acc, accumulate: false });
        k.wait(t1);
        k.wait(t2);
    });
    assert_eq!(c.first(), Some(&"E0108"));
}

/// DMA descriptor prefetch: an engine prepares its next queued command (the
/// startup) while the current one transfers, so back-to-back commands issued
/// up front on one engine pay the startup once; commands issued only after a
/// host wait on the previous one pay every startup. Startups of one engine
/// still run one at a time, so many tiny commands stay startup-bound ("few,
/// large commands" still matters). `dma_prefetch_depth = 0` turns it off.
#[test]
fn effect_dma_prefetch_hides_startup_of_queued_commands() {
    const N: u32 = 8;
    const B: u32 = 128 * 1024;
    let run = |p: &Profile, queued: bool, n: u32, bytes: u32| {
        let f = move |k: &mut Ctx| {
            let w = k.tensor("wo");
            let d = k.dm_alloc(0, bytes);
            let mut ts = vec![];
            for i in 0..n {
                let t = k.copy(engine(0, 0), w.at(i as u64 * bytes as u64), d.at(0), bytes, 4096);
                if queued {
                    ts.push(t);
                } else {
                    k.wait(t);
                }
            }
            k.wait_all(ts);
        };
        let t = trace("attention_output", Shape::default(), p, &f);
        assert!(t.diags.is_empty(), "{:?}", t.diags);
        (t.dev_cycles, t.est_cycles)
    };
    let st = p().dma_startup_cycles;
    let (dq, eq) = run(&p(), true, N, B);
    let (ds, es) = run(&p(), false, N, B);
    assert!(ds - dq > 0.9 * (N - 1) as f64 * st, "queued {} vs host-synchronised {}", dq, ds);
    assert!(es - eq > 0.9 * (N - 1) as f64 * st, "estimate: queued {} vs host-synchronised {}", eq, es);
    // the first command still pays its startup
    let xfer = (N * B) as f64 / p().dma_engine_bytes_per_cycle;
    assert!(dq > st + xfer, "queued {} < startup + transfer {}", dq, st + xfer);
    // without prefetch, queueing alone does not hide the startups
    let p0 = Profile { dma_prefetch_depth: 0.0, ..p() };
    let (dq0, _) = run(&p0, true, N, B);
    let (ds0, _) = run(&p0, false, N, B);
    assert!(dq0 > dq + 0.9 * (N - 1) as f64 * st, "depth 0: queued {} vs depth 1 {}", dq0, dq);
    assert!((ds0 - ds).abs() < 1.0, "host-synchronised commands are unaffected: {} vs {}", ds0, ds);
    assert!(dq0 > ds0 - 2.0 * N as f64 * p().host_issue_cycles, "depth 0: queued {} vs synchronised {}", dq0, ds0);
    // many tiny queued commands remain startup-bound: one large one is faster
    let (many, _) = run(&p(), true, 64, 4096);
    let (one, _) = run(&p(), true, 1, 64 * 4096);
    assert!(many > one * 4.0, "64 queued small commands {} vs one large {}", many, one);
}
