//! The cases. Each takes a fresh store.

mod fencing;
mod history;
mod lifecycle;
mod races;
mod reads;
mod registry;

pub use fencing::*;
pub use history::*;
pub use lifecycle::*;
pub use races::*;
pub use reads::*;
pub use registry::*;
