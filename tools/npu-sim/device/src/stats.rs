//! Small statistics used by `npuc bench` and the tests: the device noise model
//! (same as `npuc run`), median, coefficient of variation, Spearman's rho.
use crate::profile::Profile;

/// Noise generator of device runs (splitmix64 stream, Box–Muller).
pub struct Noise(pub u64);
impl Noise {
    pub fn new(seed: u64) -> Noise {
        Noise(crate::hot::mix(seed))
    }
    pub fn next(&mut self) -> f64 {
        self.0 = self.0.wrapping_add(1);
        crate::hot::unit(crate::hot::mix(self.0))
    }
    pub fn normal(&mut self) -> f64 {
        let u1 = self.next().max(1e-300);
        let u2 = self.next();
        (-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos()
    }
    /// Multiplicative factor of one repeat: jitter × outlier (drift excluded).
    pub fn factor(&mut self, p: &Profile) -> f64 {
        let mut f = (p.noise_sigma * self.normal()).exp();
        if self.next() < p.outlier_rate {
            f *= p.outlier_scale;
        }
        f
    }
}

pub fn median(v: &[f64]) -> f64 {
    let mut s = v.to_vec();
    s.sort_by(|a, b| a.partial_cmp(b).unwrap());
    let n = s.len();
    if n == 0 {
        return f64::NAN;
    }
    if n % 2 == 1 { s[n / 2] } else { (s[n / 2 - 1] + s[n / 2]) / 2.0 }
}

/// Sample coefficient of variation (sd / mean).
pub fn cv(v: &[f64]) -> f64 {
    let n = v.len() as f64;
    let m = v.iter().sum::<f64>() / n;
    let var = v.iter().map(|x| (x - m) * (x - m)).sum::<f64>() / (n - 1.0);
    var.sqrt() / m
}

fn ranks(v: &[f64]) -> Vec<f64> {
    let mut ix: Vec<usize> = (0..v.len()).collect();
    ix.sort_by(|&a, &b| v[a].partial_cmp(&v[b]).unwrap());
    let mut r = vec![0.0; v.len()];
    let mut i = 0;
    while i < ix.len() {
        let mut j = i;
        while j + 1 < ix.len() && v[ix[j + 1]] == v[ix[i]] {
            j += 1;
        }
        let avg = (i + j) as f64 / 2.0 + 1.0;
        for &k in &ix[i..=j] {
            r[k] = avg;
        }
        i = j + 1;
    }
    r
}

/// Spearman's rank correlation (average ranks for ties).
pub fn spearman(a: &[f64], b: &[f64]) -> f64 {
    let (ra, rb) = (ranks(a), ranks(b));
    let n = a.len() as f64;
    let (ma, mb) = (ra.iter().sum::<f64>() / n, rb.iter().sum::<f64>() / n);
    let mut sab = 0.0;
    let (mut saa, mut sbb) = (0.0, 0.0);
    for i in 0..a.len() {
        sab += (ra[i] - ma) * (rb[i] - mb);
        saa += (ra[i] - ma) * (ra[i] - ma);
        sbb += (rb[i] - mb) * (rb[i] - mb);
    }
    sab / (saa * sbb).sqrt()
}
