//! `npuc bench [--json] [--quick] [--other-npuc PATH]`: the benchmark figures
//! of npu-sim, all measured in this run (see README "Benchmark").
#[cfg(not(feature = "v1_1"))]
pub use crate::bench_imp::main;

/// Release 1.1 cannot compile the 1.0 fixtures in-process (`vtrf` was
/// renamed): its bench runs the sibling 1.0 npuc's bench with itself as the
/// other release.
#[cfg(feature = "v1_1")]
pub fn main(out: &crate::Out, json_out: bool, quick: bool, other: Option<String>, _prof: &npu_device::profile::Profile) -> i32 {
    let me = std::env::current_exe().ok();
    let v10 = other.map(std::path::PathBuf::from).or_else(|| me.as_ref().and_then(|m| Some(m.parent()?.parent()?.parent()?.join("1.0/bin/npuc"))));
    let v10 = match v10 {
        Some(p) if p.is_file() => p,
        _ => {
            out.line(&crate::error_line("usage", "the 1.0 npuc was not found (<install>/../1.0/bin/npuc); pass --other-npuc PATH"));
            return 2;
        }
    };
    let mut c = std::process::Command::new(v10);
    c.arg("bench").arg("--other-npuc").arg(me.unwrap());
    if json_out {
        c.arg("--json");
    }
    if quick {
        c.arg("--quick");
    }
    c.status().ok().and_then(|s| s.code()).unwrap_or(1)
}

