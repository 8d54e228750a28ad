//! Dev helper: cycles of the fast fixtures (and baselines with `base`) vs
//! the weight-movement minimum, in-process. `NPU_SIM_PROFILE` selects a profile.
//!   cargo run --release --example ratios [base] [check]
use npu_device::profile::Profile;
use npu_device::runtime::{exec, trace};
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
#[allow(dead_code)]
#[path = "../../../../dsl_templates/npu-sim/baseline_project_qkv.rs"]
mod bq;
#[allow(dead_code)]
#[path = "../../../../dsl_templates/npu-sim/baseline_attention_output.rs"]
mod ba;
#[allow(dead_code)]
#[path = "../../../../dsl_templates/npu-sim/baseline_feedforward.rs"]
mod bf;

fn main() {
    let a: Vec<String> = std::env::args().collect();
    let p = Profile::from_env().unwrap();
    let mut ks: Vec<(String, npu::KernelFn)> = fast::__npu_kernels().into_iter().map(|(k, f)| (k.to_string(), f)).collect();
    ks.extend(ao_fast::__npu_kernels().into_iter().map(|(k, f)| (k.to_string(), f)));
    ks.extend(ff_fast::__npu_kernels().into_iter().map(|(k, f)| (k.to_string(), f)));
    if a.iter().any(|x| x == "base") {
        for (k, f) in bq::__npu_kernels().into_iter().chain(ba::__npu_kernels()).chain(bf::__npu_kernels()) {
            ks.push((format!("base:{}", k), f));
        }
    }
    for (k, f) in ks {
        let kn = k.trim_start_matches("base:");
        let min = npu_device::refk::weight_bytes(kn, &Shape::default()) as f64 / p.hbm_sustained_bytes_per_cycle;
        let t = trace(kn, Shape::default(), &p, &f);
        let mut ok = String::new();
        if a.iter().any(|x| x == "check") {
            for seed in [1u64, 2] {
                let r = exec(kn, Shape::default(), &p, seed, true, true, &f);
                ok += &format!(" s{}={}", seed, r.verify.map(|v| format!("{}({:.3})", v.passed, v.max_abs_err)).unwrap_or(format!("{:?}", r.trace.diags.first().map(|d| d.msg.clone()))));
            }
        }
        println!("{:24} dev {:9.0} est {:9.0} min {:7.0} ratio {:6.3} diags {:?}{}", k, t.dev_cycles, t.est_cycles, min, t.dev_cycles / min, t.diags.iter().map(|d| format!("{} {} {:?}", d.code, d.msg, d.span.as_ref().map(|s| s.line))).collect::<Vec<_>>(), ok);
    }
}
