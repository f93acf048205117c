//! The workspace's configuration, all in this folder: settings files ([`settings`]), the
//! trust-gated resources ([`resources`]: context files, [`skills`], prompt [`templates`]),
//! the system prompt ([`prompt`]), Pi 1.6's project trust store ([`trust`]), and two leaves the rest of the crate shares without
//! depending on each other: [`types`] (configuration values and tool kinds) and
//! [`frontmatter`].

pub mod frontmatter;
pub mod prompt;
pub mod resources;
pub mod settings;
pub mod skills;
pub mod templates;
pub mod trust;
pub mod types;
