//! What the CLI's test files share: the embedded backends a backend-neutral
//! test runs on, and the macro that makes one `#[test]` per backend.

/// The embedded backends every backend-neutral test runs on, once each
/// (ripgrep runs its CLI tests once per engine the same way).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    Sqlite,
    #[cfg_attr(not(feature = "sled"), allow(dead_code))]
    Sled,
}

/// `per_backend!(test_fn, ...)`: a `#[test]` per backend for each function
/// `fn test_fn(backend: Backend)` (with `Backend` in scope where it is used).
macro_rules! per_backend {
    ($($name:ident),* $(,)?) => {
        mod sqlite {
            $( #[test] fn $name() { super::$name(super::Backend::Sqlite) } )*
        }
        #[cfg(feature = "sled")]
        mod sled {
            $( #[test] fn $name() { super::$name(super::Backend::Sled) } )*
        }
    };
}
