//! The cases. Each takes a fresh store.

mod batch;
mod delay;
mod fencing;
mod graph;
mod history;
mod jobs;
mod lifecycle;
mod races;
mod reads;
mod registry;
mod scope;
mod steps;

pub use batch::*;
pub use delay::*;
pub use fencing::*;
pub use graph::*;
pub use history::*;
pub use jobs::*;
pub use lifecycle::*;
pub use races::*;
pub use reads::*;
pub use registry::*;
pub use scope::*;
pub use steps::*;
