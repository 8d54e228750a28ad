//! `npu-device`: the simulated chip behind npuc. It owns device memory, generates the inputs
//! from the seed, replays a kernel's program (legality, timing, arithmetic) and checks the
//! outputs against its own reference. Never linked into a kernel.
pub mod genprofile;
pub mod hot;
pub mod json;
pub mod num;
pub mod profile;
pub mod refk;
pub mod runtime;
pub mod sim;
pub mod stats;
pub mod timing;

pub use npu::{RELEASE, RELEASE_1_1};
pub use refk::Shape;
