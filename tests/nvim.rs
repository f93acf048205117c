//! Placeholder replaced by the Neovim end-to-end test.
