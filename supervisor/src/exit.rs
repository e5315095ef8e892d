//! Exit statuses: the contract scripts act on.

use baton_core::{Error, ErrorKind};

pub const OK: i32 = 0;
pub const REFUSED: i32 = 1;
pub const INVALID: i32 = 2;
pub const UNAVAILABLE: i32 = 3;
pub const INDETERMINATE: i32 = 4;
pub const NOT_FOUND: i32 = 5;
/// A server refused the caller: no valid token, or a worker's token
/// on an operator's request.
pub const NOT_PERMITTED: i32 = 6;

/// The exit status for an error the store or the input gave.
pub fn exit_code_for(e: &Error) -> i32 {
    match e.kind {
        ErrorKind::Invalid => INVALID,
        ErrorKind::Indeterminate => INDETERMINATE,
        ErrorKind::Unavailable | ErrorKind::Corrupt | ErrorKind::Unsupported => UNAVAILABLE,
        ErrorKind::NotPermitted => NOT_PERMITTED,
    }
}
