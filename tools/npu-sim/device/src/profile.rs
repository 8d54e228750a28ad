//! Hardware profile: `key = value` lines, `#` comments. Every timing and
//! capacity constant of the simulator comes from here (see PROFILE.md).

macro_rules! profile_keys {
    ($( $name:ident = $def:expr ),* $(,)?) => {
        #[derive(Clone, Debug)]
        pub struct Profile { $( pub $name: f64, )* }
        impl Default for Profile {
            fn default() -> Self { Profile { $( $name: $def, )* } }
        }
        impl Profile {
            pub const KEYS: &'static [&'static str] = &[$( stringify!($name), )*];
            fn set(&mut self, key: &str, v: f64) -> bool {
                match key { $( stringify!($name) => { self.$name = v; true } )* _ => false }
            }
            /// Set one key by name (false: no such key).
            pub fn set_key(&mut self, key: &str, v: f64) -> bool { self.set(key, v) }
            pub fn entries(&self) -> Vec<(&'static str, f64)> { vec![$( (stringify!($name), self.$name), )*] }
        }
    };
}

profile_keys! {
    // ---- the fixed, portable key set (NPU_SIM.md) ----
    clock_ghz = 1.0,
    clusters = 2.0,
    slices_per_cluster = 8.0,
    lanes_per_slice = 8.0,
    dm_bytes_per_slice = 524288.0,
    dm_banks = 16.0,
    hbm_peak_bytes_per_cycle = 1536.0,
    hbm_sustained_bytes_per_cycle = 1400.0,
    dma_engines_per_cluster = 8.0,
    dma_engine_bytes_per_cycle = 256.0,
    dma_startup_cycles = 500.0,
    dma_max_packet_bytes = 4096.0,
    unaligned_write_penalty = 50.0,
    bank_conflict_penalty = 30.0,
    bank_hang_run = 64.0,
    pass_issue_cycles = 600.0,
    switch_bytes_per_cycle = 27.0,
    trf_bytes_per_lane = 8192.0,
    vrf_bytes_per_slice = 8192.0,
    noise_sigma = 0.02,
    outlier_rate = 0.02,
    outlier_scale = 1.25,
    drift_per_hour = 0.01,
    launch_overhead_ms = 40.0,
    max_concurrent_runs = 2.0,
    transient_failure_rate = 0.01,
    // ---- additional keys (optional in profiles) ----
    dm_bank_bytes = 64.0,
    dma_packet_overhead_cycles = 4.0,
    tensor_macs_per_lane_cycle = 64.0,
    vector_elems_per_cycle = 16.0,
    vector_op_cycles = 40.0,
    switch_startup_cycles = 200.0,
    host_issue_cycles = 2.0,
    hbm_align_bytes = 256.0,
    dma_prefetch_depth = 1.0,
}

impl Profile {
    /// Parse profile text. Unknown key → error naming key and file.
    pub fn parse(text: &str, file: &str) -> Result<Profile, String> {
        let mut p = Profile::default();
        for (i, raw) in text.lines().enumerate() {
            let line = raw.split('#').next().unwrap().trim();
            if line.is_empty() {
                continue;
            }
            let (k, v) = line
                .split_once('=')
                .ok_or_else(|| format!("{}:{}: expected `key = value`, got `{}`", file, i + 1, line))?;
            let k = k.trim();
            let v: f64 = v
                .trim()
                .parse()
                .map_err(|_| format!("{}:{}: value of `{}` is not a number: `{}`", file, i + 1, k, v.trim()))?;
            if !v.is_finite() || v < 0.0 {
                return Err(format!("{}:{}: value of `{}` must be a finite number >= 0", file, i + 1, k));
            }
            if !p.set(k, v) {
                return Err(format!("{}:{}: unknown profile key `{}`", file, i + 1, k));
            }
        }
        Ok(p)
    }

    /// The profile named by `NPU_SIM_PROFILE`, else the compiled-in default.
    pub fn from_env() -> Result<Profile, String> {
        match std::env::var("NPU_SIM_PROFILE") {
            Ok(path) if !path.is_empty() => {
                let text = std::fs::read_to_string(&path)
                    .map_err(|e| format!("cannot read profile {}: {}", path, e))?;
                Profile::parse(&text, &path)
            }
            _ => Ok(Profile::default()),
        }
    }

    pub fn slices(&self) -> usize {
        (self.clusters as usize) * (self.slices_per_cluster as usize)
    }
    pub fn engines_per_cluster(&self) -> usize {
        self.dma_engines_per_cluster as usize
    }
    /// Max packet size the toolchain accepts (release 1.1 doubles it).
    pub fn max_packet(&self) -> u64 {
        let m = self.dma_max_packet_bytes as u64;
        if crate::RELEASE_1_1 { m * 2 } else { m }
    }
    /// Effective pass issue cost (release 1.1 makes pass issue cheaper: 2/3).
    pub fn pass_issue(&self) -> f64 {
        if crate::RELEASE_1_1 { self.pass_issue_cycles * 2.0 / 3.0 } else { self.pass_issue_cycles }
    }
}
