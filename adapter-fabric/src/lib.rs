//! Not written yet: see the open issues.
