//! `npu`: the DSL that npu-sim kernels are written against. A kernel's host code builds a
//! program (allocations, DMA commands, passes, vector ops, waits); the device — npuc's own
//! process, never linked into the kernel — executes, times and checks it. See API.md.
pub mod ctx;
pub mod host;
pub mod program;
pub mod shape;
pub mod types;

pub use ctx::{Ctx, Launch};
pub use shape::Shape;
pub use types::{engine, lp, Dm, Dt, Engine, Hbm, HwInfo, Loc, Loop, Pass, Tile, Token, Trf, Vrf};

/// Release of this library/toolchain.
#[cfg(not(feature = "v1_1"))]
pub const RELEASE: &str = "1.0.0";
#[cfg(feature = "v1_1")]
pub const RELEASE: &str = "1.1.0";
pub const RELEASE_1_1: bool = cfg!(feature = "v1_1");

/// A kernel entry point.
pub type KernelFn = fn(&mut Ctx);

/// Declare the kernels a file provides and generate its `main`:
/// `npu::kernels! { feedforward => my_ff, project_qkv => my_qkv }`.
#[macro_export]
macro_rules! kernels {
    ($($name:ident => $f:path),+ $(,)?) => {
        #[allow(dead_code)]
        pub fn __npu_kernels() -> ::std::vec::Vec<(&'static str, $crate::KernelFn)> {
            ::std::vec![$((stringify!($name), $f as $crate::KernelFn)),+]
        }
        #[allow(dead_code)]
        fn main() {
            $crate::host::main(&__npu_kernels());
        }
    };
}

pub mod prelude {
    pub use crate::shape::Shape;
    pub use crate::types::{engine, lp, Dm, Dt, Engine, Hbm, HwInfo, Loc, Loop, Pass, Tile, Token, Trf, Vrf};
    pub use crate::Ctx;
}
