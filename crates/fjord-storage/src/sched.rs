//! Per-disk request scheduling (sans-IO). Placeholder: being written.
