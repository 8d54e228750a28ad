// The shared prelude of the npu-sim templates (template.yaml `prelude: prelude.rs`): helpers
// written from the public docs (dma.md: packets are multiples of 256 bytes up to the engine's
// maximum; tensor-unit.md: K in multiples of 64). npuopt appends it to every instantiation of a
// template that names it, after the template's own code; it has no params. Each template
// uses what it needs (npuc does not warn about the rest).

/// The epsilon of a distributed RMSNorm's square root, whose sum of squares is already complete.
#[allow(dead_code)]
const EPS_SQRT: f32 = 1e-30;

/// Largest multiple of 256 <= max dividing bytes; else the largest divisor <= max.
#[allow(dead_code)]
fn pk(bytes: u32, max: u32) -> u32 {
    let mut p = (max.min(bytes) / 256) * 256;
    while p >= 256 {
        if bytes % p == 0 {
            return p;
        }
        p -= 256;
    }
    let mut p = max.min(bytes);
    while bytes % p != 0 {
        p -= 1;
    }
    p
}

/// Largest multiple of 64 <= max dividing n.
#[allow(dead_code)]
fn chunk_of(n: u32, max: u32) -> u32 {
    let mut c = (max / 64) * 64;
    while c > 64 && n % c != 0 {
        c -= 64;
    }
    c
}

/// A token whose command is ordered before a command that is waited on.
#[allow(dead_code)]
fn drop_token(t: Token) {
    std::mem::forget(t);
}
