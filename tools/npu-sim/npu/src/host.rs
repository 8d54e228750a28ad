//! The host side of a kernel binary: run the kernel function against a program builder and
//! hand the program to the device. Internal interface used by npuc:
//!
//! ```text
//! BIN list                                         kernel names, one per line
//! BIN host KERNEL H,F,QH,KVH,HD,CL POS HW          the program on fd 3 (program.rs)
//! ```
//!
//! The program goes to file descriptor 3, which npuc opens for it; the host code's own
//! stdout and stderr are free for its debugging output (npuc discards them).
//!
//! HW is the 13 public facts of `HwInfo`, comma-separated, in declaration order.
use crate::ctx::{Ctx, Launch, Stop};
use crate::program::{Op, Program};
use crate::shape::Shape;
use crate::types::HwInfo;
use crate::KernelFn;
use std::cell::RefCell;

thread_local! {
    static PANIC_AT: RefCell<Option<(String, (String, u32, u32))>> = const { RefCell::new(None) };
    static IN_KERNEL: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

fn install_hook() {
    use std::sync::Once;
    static O: Once = Once::new();
    O.call_once(|| {
        let prev = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if !IN_KERNEL.with(|k| k.get()) {
                prev(info);
                return;
            }
            if info.payload().downcast_ref::<Stop>().is_some() {
                return;
            }
            let msg = if let Some(s) = info.payload().downcast_ref::<&str>() {
                s.to_string()
            } else if let Some(s) = info.payload().downcast_ref::<String>() {
                s.clone()
            } else {
                "panic".to_string()
            };
            let at = info.location().map(|l| (l.file().to_string(), l.line(), l.column()));
            PANIC_AT.with(|p| *p.borrow_mut() = Some((msg, at.unwrap_or_else(|| ("?".into(), 0, 0)))));
        }));
    });
}

/// Run `f` against `ctx`; a panic in the host code becomes a `Panic` op.
/// Returns whether the host code returned normally.
pub fn run_host(ctx: &mut Ctx, f: &dyn Fn(&mut Ctx)) -> bool {
    install_hook();
    PANIC_AT.with(|p| *p.borrow_mut() = None);
    IN_KERNEL.with(|k| k.set(true));
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(ctx)));
    IN_KERNEL.with(|k| k.set(false));
    match r {
        Ok(()) => true,
        Err(e) => {
            if e.downcast_ref::<Stop>().is_none() {
                let (msg, (file, line, col)) = PANIC_AT.with(|p| p.borrow_mut().take()).unwrap_or(("panic".into(), ("?".into(), 0, 0)));
                ctx.push_at(Op::Panic { msg }, &file, line, col);
            }
            true
        }
    }
}

/// Build the program of kernel `f` in memory (npuc's benchmark and the tests).
pub fn record(launch: Launch, f: &dyn Fn(&mut Ctx)) -> Program {
    let mut ctx = Ctx::new(launch);
    let done = run_host(&mut ctx, f);
    ctx.into_program(done)
}

fn fail(m: String) -> ! {
    eprintln!("npu kernel binary: {}", m);
    std::process::exit(9)
}

fn nums(s: &str, n: usize) -> Vec<u64> {
    let v: Vec<u64> = s.split(',').filter_map(|x| x.parse().ok()).collect();
    if v.len() != n {
        fail(format!("expected {} comma-separated numbers, got `{}`", n, s));
    }
    v
}

/// Parse the launch arguments `KERNEL SHAPE POS HW`.
pub fn parse_launch(a: &[String]) -> Launch {
    let kernel = a.first().cloned().unwrap_or_default();
    let s = nums(a.get(1).map(|s| s.as_str()).unwrap_or(""), 6);
    let shape = Shape { hidden: s[0] as u32, ffn: s[1] as u32, q_heads: s[2] as u32, kv_heads: s[3] as u32, head_dim: s[4] as u32, cache_len: s[5] as u32 };
    let pos: u32 = a.get(2).and_then(|x| x.parse().ok()).unwrap_or_else(|| fail("bad position".into()));
    let h = nums(a.get(3).map(|s| s.as_str()).unwrap_or(""), 13);
    let hw = HwInfo {
        clusters: h[0] as usize,
        slices_per_cluster: h[1] as usize,
        slices: h[2] as usize,
        lanes: h[3] as u32,
        dm_bytes: h[4] as u32,
        dm_banks: h[5] as u32,
        trf_bytes_per_lane: h[6] as u32,
        vrf_bytes: h[7] as u32,
        dma_engines_per_cluster: h[8] as usize,
        max_packet_bytes: h[9] as u32,
        max_seq_entries: h[10] as usize,
        max_seq_iterations: h[11] as u32,
        hbm_align: h[12] as u32,
    };
    Launch { kernel, shape, pos, hw }
}

/// The launch arguments for `parse_launch` (npuc's side).
pub fn launch_args(l: &Launch) -> Vec<String> {
    let s = &l.shape;
    let h = &l.hw;
    vec![
        l.kernel.clone(),
        format!("{},{},{},{},{},{}", s.hidden, s.ffn, s.q_heads, s.kv_heads, s.head_dim, s.cache_len),
        l.pos.to_string(),
        format!(
            "{},{},{},{},{},{},{},{},{},{},{},{},{}",
            h.clusters, h.slices_per_cluster, h.slices, h.lanes, h.dm_bytes, h.dm_banks, h.trf_bytes_per_lane, h.vrf_bytes, h.dma_engines_per_cluster, h.max_packet_bytes, h.max_seq_entries, h.max_seq_iterations, h.hbm_align
        ),
    ]
}

extern "C" {
    fn fcntl(fd: i32, cmd: i32, ...) -> i32;
}
const PROGRAM_FD: i32 = 3;
const F_GETFD: i32 = 1;

/// Where the program goes: fd 3 when npuc opened it, else stdout (a binary run by hand).
fn program_sink() -> Box<dyn std::io::Write> {
    use std::os::unix::io::FromRawFd;
    // SAFETY: fcntl(F_GETFD) only asks whether the descriptor is open.
    if unsafe { fcntl(PROGRAM_FD, F_GETFD) } >= 0 {
        // SAFETY: fd 3 is open and handed to us for this purpose; nothing else owns it.
        Box::new(unsafe { std::fs::File::from_raw_fd(PROGRAM_FD) })
    } else {
        Box::new(std::io::stdout())
    }
}

/// `main` of a compiled kernel file.
pub fn main(kernels: &[(&'static str, KernelFn)]) {
    let a: Vec<String> = std::env::args().collect();
    match a.get(1).map(|s| s.as_str()) {
        Some("list") => {
            for (n, _) in kernels {
                println!("{}", n);
            }
        }
        Some("host") => {
            let launch = parse_launch(&a[2..]);
            let f = match kernels.iter().find(|(n, _)| *n == launch.kernel) {
                Some((_, f)) => *f,
                None => fail(format!("kernel {} not provided", launch.kernel)),
            };
            let mut ctx = Ctx::streaming(launch, program_sink());
            let done = run_host(&mut ctx, &f);
            ctx.finish_stream(done);
        }
        _ => fail("this is a compiled npu-sim kernel; run it through npuc".into()),
    }
}
