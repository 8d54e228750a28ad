//! Random chips: every hidden hardware constant drawn from a seed within a documented
//! plausible range (PROFILE.md, "Generated profiles"). The public facts of the vendor docs
//! (clusters, slices, lanes, capacities, peak HBM, packet limit, alignment) stay as
//! documented, so the docs and target.yaml remain true for every generated chip.
use crate::hot::{mix, unit};
use crate::profile::Profile;

/// One drawn key: name, low, high, how it is drawn.
#[derive(Clone, Copy)]
pub enum Draw {
    /// log-uniform in [lo, hi], rounded to a multiple of `step`
    Log(f64, f64, f64),
    /// uniform in [lo, hi], rounded to a multiple of `step`
    Lin(f64, f64, f64),
    /// one of the values
    Pick(&'static [f64]),
}

/// The generated keys and their ranges (kept in sync with PROFILE.md).
pub const RANGES: &[(&str, Draw)] = &[
    ("dma_startup_cycles", Draw::Log(150.0, 2500.0, 10.0)),
    ("dma_engines_per_cluster", Draw::Lin(4.0, 16.0, 1.0)),
    ("dma_engine_bytes_per_cycle", Draw::Log(64.0, 512.0, 16.0)),
    ("hbm_sustained_bytes_per_cycle", Draw::Lin(800.0, 1480.0, 10.0)),
    ("dma_packet_overhead_cycles", Draw::Log(1.0, 16.0, 1.0)),
    ("dma_prefetch_depth", Draw::Pick(&[0.0, 1.0, 1.0, 2.0])),
    ("pass_issue_cycles", Draw::Log(120.0, 1800.0, 10.0)),
    ("tensor_macs_per_lane_cycle", Draw::Pick(&[32.0, 64.0, 128.0])),
    ("vector_op_cycles", Draw::Log(15.0, 120.0, 1.0)),
    ("vector_elems_per_cycle", Draw::Pick(&[8.0, 16.0, 32.0])),
    ("switch_bytes_per_cycle", Draw::Log(8.0, 120.0, 1.0)),
    ("switch_startup_cycles", Draw::Log(80.0, 600.0, 10.0)),
    ("unaligned_write_penalty", Draw::Log(8.0, 120.0, 1.0)),
    ("bank_conflict_penalty", Draw::Log(4.0, 60.0, 1.0)),
    ("bank_hang_run", Draw::Pick(&[32.0, 48.0, 64.0, 96.0, 128.0])),
    ("host_issue_cycles", Draw::Lin(1.0, 6.0, 1.0)),
    ("noise_sigma", Draw::Log(0.005, 0.04, 0.001)),
    ("outlier_rate", Draw::Lin(0.0, 0.05, 0.005)),
    ("outlier_scale", Draw::Lin(1.1, 1.6, 0.05)),
    ("drift_per_hour", Draw::Lin(0.0, 0.02, 0.001)),
    ("launch_overhead_ms", Draw::Lin(20.0, 60.0, 5.0)),
    ("max_concurrent_runs", Draw::Lin(1.0, 4.0, 1.0)),
    ("transient_failure_rate", Draw::Lin(0.0, 0.02, 0.002)),
];

fn round_to(v: f64, step: f64) -> f64 {
    let r = (v / step).round() * step;
    // keep decimal steps tidy in the written profile
    (r * 1e6).round() / 1e6
}

fn draw(d: Draw, u: f64) -> f64 {
    match d {
        Draw::Log(lo, hi, step) => round_to((lo.ln() + u * (hi.ln() - lo.ln())).exp(), step).clamp(lo, hi),
        Draw::Lin(lo, hi, step) => round_to(lo + u * (hi - lo), step).clamp(lo, hi),
        Draw::Pick(vals) => vals[((u * vals.len() as f64) as usize).min(vals.len() - 1)],
    }
}

/// Why a drawn chip is not internally consistent (None: it is).
pub fn inconsistency(p: &Profile) -> Option<String> {
    let engine_total = p.clusters * p.dma_engines_per_cluster * p.dma_engine_bytes_per_cycle;
    if engine_total < p.hbm_sustained_bytes_per_cycle {
        return Some(format!("its DMA engines together move {} B/cycle, below the sustained HBM bandwidth {}", engine_total, p.hbm_sustained_bytes_per_cycle));
    }
    if p.hbm_sustained_bytes_per_cycle > p.hbm_peak_bytes_per_cycle {
        return Some("sustained HBM bandwidth above the peak".into());
    }
    if p.dma_engine_bytes_per_cycle > p.hbm_sustained_bytes_per_cycle {
        return Some("one DMA engine faster than the whole HBM".into());
    }
    if p.switch_bytes_per_cycle >= p.dma_engine_bytes_per_cycle {
        return Some("a switch network as fast as a DMA engine (the docs call it much slower than HBM)".into());
    }
    None
}

/// The chip of `seed`: the default profile with every key of `RANGES` drawn; drawn again
/// (from the same seed's stream) until it is internally consistent.
pub fn generate(seed: u64) -> (Profile, u32) {
    let mut attempt = 0u32;
    loop {
        let mut p = Profile::default();
        for (i, (key, d)) in RANGES.iter().enumerate() {
            let u = unit(mix(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ mix(((attempt as u64) << 32) | i as u64)));
            assert!(p.set_key(key, draw(*d, u)), "generated key {} is a profile key", key);
        }
        if inconsistency(&p).is_none() {
            return (p, attempt);
        }
        attempt += 1;
    }
}

fn render_keys(p: &Profile, only: &[&str]) -> String {
    p.entries().iter().filter(|(k, _)| only.is_empty() || only.contains(k)).map(|(k, v)| format!("{} = {}", k, v)).collect::<Vec<_>>().join("\n")
}

/// The profile text of `seed`'s chip (only the drawn keys; the rest take their defaults).
pub fn render(seed: u64) -> String {
    let (p, attempt) = generate(seed);
    let keys: Vec<&str> = RANGES.iter().map(|(k, _)| *k).collect();
    format!("# generated chip: seed {} (draw {}); ranges in PROFILE.md\n{}\n", seed, attempt + 1, render_keys(&p, &keys))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_seed_always_gives_the_same_consistent_chip() {
        for seed in 0..200u64 {
            let t = render(seed);
            assert_eq!(t, render(seed));
            let p = Profile::parse(&t, "gen").unwrap();
            assert!(inconsistency(&p).is_none(), "seed {}: {:?}", seed, inconsistency(&p));
            for (k, d) in RANGES {
                let v = p.entries().iter().find(|(n, _)| n == k).unwrap().1;
                let (lo, hi) = match d {
                    Draw::Log(lo, hi, _) | Draw::Lin(lo, hi, _) => (*lo, *hi),
                    Draw::Pick(v) => (v.iter().cloned().fold(f64::MAX, f64::min), v.iter().cloned().fold(f64::MIN, f64::max)),
                };
                assert!(v >= lo && v <= hi, "seed {} {} = {} outside [{}, {}]", seed, k, v, lo, hi);
            }
        }
    }

    #[test]
    fn seeds_spread_over_the_ranges() {
        for (k, _) in RANGES {
            let vals: std::collections::BTreeSet<u64> = (0..64u64)
                .map(|s| {
                    let p = generate(s).0;
                    p.entries().iter().find(|(n, _)| n == k).unwrap().1.to_bits()
                })
                .collect();
            assert!(vals.len() >= 2, "{} never varies", k);
        }
        // the public facts never move
        let d = Profile::default();
        for s in 0..64 {
            let p = generate(s).0;
            assert_eq!((p.clusters, p.slices_per_cluster, p.dm_bytes_per_slice, p.dma_max_packet_bytes), (d.clusters, d.slices_per_cluster, d.dm_bytes_per_slice, d.dma_max_packet_bytes));
        }
    }
}
