//! Exact number formats: fp8 e4m3 (OCP "FN": no infinities, NaN = S.1111.111,
//! max 448), fp4 e2m1 (values 0, .5, 1, 1.5, 2, 3, 4, 6), bf16 with
//! round-to-nearest-even, f32 accumulation.

/// Decode an fp8 e4m3 byte.
pub fn fp8_to_f32(b: u8) -> f32 {
    let s = if b & 0x80 != 0 { -1.0f32 } else { 1.0 };
    let e = ((b >> 3) & 0xF) as i32;
    let m = (b & 7) as f32;
    if e == 15 && (b & 7) == 7 {
        return f32::NAN;
    }
    if e == 0 {
        s * m / 8.0 * (2.0f32).powi(-6)
    } else {
        s * (1.0 + m / 8.0) * (2.0f32).powi(e - 7)
    }
}

/// Encode f32 → fp8 e4m3, round to nearest even, saturating to ±448; NaN → 0x7F.
pub fn f32_to_fp8(x: f32) -> u8 {
    if x.is_nan() {
        return 0x7F;
    }
    let sign: u8 = if x.is_sign_negative() { 0x80 } else { 0 };
    let a = x.abs();
    if a >= 448.0 {
        return sign | 0x7E;
    }
    // work in units of the smallest subnormal 2^-9 for the subnormal range,
    // otherwise in units of the ulp of a's binade.
    let sub = a < 2f32.powi(-6);
    let (e, unit) = if sub {
        (0i32, 2f32.powi(-9))
    } else {
        let e = a.log2().floor() as i32;
        let e = if 2f32.powi(e) > a { e - 1 } else if 2f32.powi(e + 1) <= a { e + 1 } else { e };
        (e, 2f32.powi(e - 3))
    };
    let q = a / unit; // exact (power of two scaling)
    let fl = q.floor();
    let frac = q - fl;
    let mut n = fl as u32;
    if frac > 0.5 || (frac == 0.5 && n & 1 == 1) {
        n += 1;
    }
    if sub {
        // n in 0..=8; 8 == 2^-6 == code 0x08, naturally
        sign | n as u8
    } else {
        // n in 8..=16 (mantissa 1.xxx * 8)
        let mut ee = e + 7;
        let mut m = n;
        if m == 16 {
            m = 8;
            ee += 1;
        }
        if ee > 15 || (ee == 15 && m - 8 == 7) {
            return sign | 0x7E;
        }
        sign | ((ee as u8) << 3) | ((m - 8) as u8)
    }
}

pub const FP4_VALUES: [f32; 8] = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0];

/// Decode an fp4 e2m1 nibble (bit 3 = sign).
pub fn fp4_to_f32(n: u8) -> f32 {
    let v = FP4_VALUES[(n & 7) as usize];
    if n & 8 != 0 {
        -v
    } else {
        v
    }
}

/// Encode f32 → fp4 e2m1, round to nearest even (on the code), saturating to ±6.
pub fn f32_to_fp4(x: f32) -> u8 {
    let sign = if x.is_sign_negative() { 8u8 } else { 0 };
    let a = if x.is_nan() { 0.0 } else { x.abs() };
    let mut best = 0usize;
    for i in 1..8 {
        let d = (FP4_VALUES[i] - a).abs();
        let db = (FP4_VALUES[best] - a).abs();
        if d < db || (d == db && i % 2 == 0) {
            best = i;
        }
    }
    sign | best as u8
}

/// f32 → bf16 bits, round to nearest even; NaN stays NaN (quiet).
pub fn f32_to_bf16(x: f32) -> u16 {
    let b = x.to_bits();
    if x.is_nan() {
        return ((b >> 16) as u16) | 0x0040;
    }
    let bias = 0x7FFF + ((b >> 16) & 1);
    ((b.wrapping_add(bias)) >> 16) as u16
}

pub fn bf16_to_f32(h: u16) -> f32 {
    f32::from_bits((h as u32) << 16)
}

/// Round an f32 to the nearest bf16 value (returned as f32).
pub fn round_bf16(x: f32) -> f32 {
    bf16_to_f32(f32_to_bf16(x))
}

/// Lookup tables used by the hot loops.
pub struct Luts {
    pub fp8: [f32; 256],
    /// byte → (low nibble value, high nibble value)
    pub fp4pair: [[f32; 2]; 256],
}

pub fn luts() -> &'static Luts {
    use std::sync::atomic::{AtomicPtr, Ordering};
    // built once and never freed (std::sync::OnceLock is 1.70; this crate builds with 1.63)
    static INIT: std::sync::Once = std::sync::Once::new();
    static L: AtomicPtr<Luts> = AtomicPtr::new(std::ptr::null_mut());
    INIT.call_once(|| L.store(Box::into_raw(Box::new(build_luts())), Ordering::Release));
    // SAFETY: set once above (call_once returns after the store) and never freed or mutated.
    unsafe { &*L.load(Ordering::Acquire) }
}

fn build_luts() -> Luts {
    let mut fp8 = [0f32; 256];
    let mut fp4pair = [[0f32; 2]; 256];
    for i in 0..256 {
        fp8[i] = fp8_to_f32(i as u8);
        fp4pair[i] = [fp4_to_f32(i as u8 & 0xF), fp4_to_f32((i as u8) >> 4)];
    }
    Luts { fp8, fp4pair }
}

/// gelu with the tanh approximation (as used by GeGLU in Gemma).
pub fn gelu_tanh(x: f32) -> f32 {
    let c = 0.797_884_6f32; // sqrt(2/pi)
    0.5 * x * (1.0 + (c * (x + 0.044715 * x * x * x)).tanh())
}
