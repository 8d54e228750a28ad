//! `npu`: the DSL that npu-sim kernels are written against, and the simulator
//! behind it. See API.md for the kernel-author reference.
pub mod hot;
pub mod json;
pub mod num;
pub mod profile;
pub mod refk;
pub mod runtime;
pub mod sim;
pub mod stats;
pub mod timing;

pub use refk::Shape;
pub use sim::{engine, lp, Ctx, Dm, Dt, Engine, Hbm, HwInfo, Loc, Loop, Pass, Tile, Token, Trf, Vrf};

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
            $crate::runtime::main(&__npu_kernels());
        }
    };
}

pub mod prelude {
    pub use crate::refk::Shape;
    pub use crate::sim::{engine, lp, Ctx, Dm, Dt, Engine, Hbm, HwInfo, Loc, Loop, Pass, Tile, Token, Trf, Vrf};
}
