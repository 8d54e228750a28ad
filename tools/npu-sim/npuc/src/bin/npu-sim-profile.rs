//! `npu-sim-profile SEED [--out FILE]`: the profile of a random chip (tools/npu-sim/PROFILE.md,
//! "Generated profiles"). For benchmarks that judge npuopt on chips nobody tuned for; npuopt
//! itself never runs it.
fn main() {
    let a: Vec<String> = std::env::args().skip(1).collect();
    let usage = || -> ! {
        eprintln!("usage: npu-sim-profile SEED [--out FILE]");
        std::process::exit(2)
    };
    let seed: u64 = a.first().and_then(|s| s.parse().ok()).unwrap_or_else(|| usage());
    let text = npu_device::genprofile::render(seed);
    match a.get(1).map(|s| s.as_str()) {
        None => print!("{}", text),
        Some("--out") => {
            let f = a.get(2).unwrap_or_else(|| usage());
            if let Err(e) = std::fs::write(f, &text) {
                eprintln!("npu-sim-profile: cannot write {}: {}", f, e);
                std::process::exit(1);
            }
        }
        _ => usage(),
    }
}
