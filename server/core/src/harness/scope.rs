//! Settings' `enabledModels` as Pi 1.6 reads them: the models a session cycles through and
//! starts with (`resolveModelScopeFromModels` and `findInitialModel`'s callers in
//! `core/model-resolver.js` and `main.js`, `AgentSession.cycleModel` in
//! `core/agent-session.js`).
//!
//! Each pattern of the list, in order, adds the models it names (once each; `provider/id` and
//! provider equal) from the models that can be used ([`usable_models`]):
//! - a pattern holding `*`, `?` or `[` is a glob (an optional `:level` suffix of a thinking
//!   level's name taken off first): a model whose id or `provider/id` it names exactly (ids such
//!   as `m[1m]` are not globs), else every model whose `provider/id` or id it matches, case
//!   ignored (Pi uses minimatch: `*` and `?` do not cross a `/`; here the `globset` crate);
//! - any other pattern names one model as Pi's `resolveModelReference` resolves it: an id
//!   (case ignored) or `provider/id`, else the models whose id or name contains it (an alias
//!   before a dated `-YYYYMMDD` id, then the greatest id), a `:level` suffix giving the model's
//!   thinking level (an unknown level is warned of and left out); the same id on several
//!   providers adds each, with a warning.
//!
//! A pattern naming nothing is warned of (`No models match pattern "P"`). With a non-empty
//! scope, a new session starts at settings' default model when the scope holds it, else at
//! the scope's first model, at the pattern's level when it gave one ([`startup_choice`]); and
//! cycling goes through the scope's models in order ([`next_cycle_index`]). Without one,
//! cycling goes through every usable model.

use globset::GlobBuilder;
use pi_ai::models::ThinkingLevel;
use pi_ai::{Model, Registry};

use crate::resources::WorkspaceConfig;

/// A model of the scope and the thinking level its pattern gave (`None`: the session's own,
/// as Pi 1.6 keeps it undefined).
#[derive(Debug, Clone)]
pub struct ScopedModel {
    pub model: Model,
    pub thinking_level: Option<ThinkingLevel>,
}

/// The models `enabledModels` names, in order, and the warnings its patterns gave.
#[derive(Debug, Clone, Default)]
pub struct ModelScope {
    pub models: Vec<ScopedModel>,
    /// Pi 1.6's diagnostics' messages (`No models match pattern "…"`, `Pattern "…" matches
    /// several providers: …`, `Invalid thinking level …`), without the `Warning: ` prefix.
    pub warnings: Vec<String>,
}

/// The models that can be used now in `ws` (keyed, or of a models.json provider), in the
/// registry's order; the offline demo is not one of them.
pub fn usable_models(ws: &WorkspaceConfig) -> Vec<Model> {
    let demo = crate::harness::scripted_model().full_id();
    Registry::load_files(&ws.models_files())
        .usable_models()
        .filter(|m| m.full_id() != demo)
        .collect()
}

/// The scope of `ws`'s settings' `enabledModels` over its usable models; `None` when the
/// setting is unset or empty (Pi 1.6: no scope).
pub fn workspace_scope(ws: &WorkspaceConfig) -> Option<ModelScope> {
    let patterns = enabled_model_patterns(&ws.settings())?;
    Some(resolve_scope(&patterns, &usable_models(ws)))
}

/// Settings' `enabledModels` (strings; other values skipped); `None` when unset or empty.
pub fn enabled_model_patterns(settings: &crate::settings::Settings) -> Option<Vec<String>> {
    let patterns: Vec<String> = settings
        .raw("enabledModels")?
        .as_array()?
        .iter()
        .filter_map(|p| p.as_str().map(str::to_string))
        .collect();
    (!patterns.is_empty()).then_some(patterns)
}

/// Pi 1.6's `getNextCycleIndex`: the index after `current` (`None`: not in the list — the
/// first, or the last going backward) among `len` models; `None` when there is none to go to
/// (no model, or only the current one).
pub fn next_cycle_index(current: Option<usize>, len: usize, backward: bool) -> Option<usize> {
    match current {
        _ if len == 0 => None,
        None => Some(if backward { len - 1 } else { 0 }),
        Some(_) if len == 1 => None,
        Some(i) if backward => Some((i + len - 1) % len),
        Some(i) => Some((i + 1) % len),
    }
}

/// A new session's model from the scope (Pi 1.6's `buildSessionOptions`, no `--model`):
/// settings' `defaultProvider` / `defaultModel` when the scope holds it, else the scope's
/// first; `None` for an empty scope.
pub fn startup_choice<'a>(
    scope: &'a ModelScope,
    settings: &crate::settings::Settings,
) -> Option<&'a ScopedModel> {
    let saved = match (&settings.default_provider, &settings.default_model) {
        (Some(p), Some(id)) => scope
            .models
            .iter()
            .find(|s| &s.model.provider == p && &s.model.id == id),
        _ => None,
    };
    saved.or(scope.models.first())
}

/// Pi 1.6's `resolveModelScopeFromModels(patterns, models)` (see the module doc).
pub fn resolve_scope(patterns: &[String], models: &[Model]) -> ModelScope {
    let mut scope = ModelScope::default();
    let add = |scope: &mut ModelScope, m: &Model, level: Option<ThinkingLevel>| {
        if !scope
            .models
            .iter()
            .any(|s| s.model.provider == m.provider && s.model.id == m.id)
        {
            scope.models.push(ScopedModel {
                model: m.clone(),
                thinking_level: level,
            });
        }
    };
    let ambiguous = |pattern: &str, candidates: &[&Model]| {
        let mut providers: Vec<&str> = candidates.iter().map(|m| m.provider.as_str()).collect();
        providers.sort_unstable();
        providers.dedup();
        format!(
            "Pattern \"{pattern}\" matches several providers: {}. Use provider/id to choose one.",
            providers.join(", ")
        )
    };
    for pattern in patterns {
        if pattern.contains(['*', '?', '[']) {
            let (glob, level) = match split_thinking_suffix(pattern) {
                Some((base, level)) => (base, Some(level)),
                None => (pattern.as_str(), None),
            };
            let exact = resolve_reference(glob, models, Suffix::None, false);
            let matches: Vec<&Model> = match exact {
                Resolved::One(m) => vec![m],
                Resolved::Ambiguous(c) => {
                    scope.warnings.push(ambiguous(pattern, &c));
                    c
                }
                Resolved::NotFound => glob_matches(glob, models),
            };
            if matches.is_empty() {
                scope
                    .warnings
                    .push(format!("No models match pattern \"{pattern}\""));
            }
            for m in matches {
                add(&mut scope, m, level);
            }
            continue;
        }
        let (resolved, level, warning) =
            resolve_text(pattern.trim(), models, Suffix::Lenient, true);
        if let Some(w) = warning {
            scope.warnings.push(w);
        }
        let matches = match resolved {
            Resolved::NotFound => {
                scope
                    .warnings
                    .push(format!("No models match pattern \"{pattern}\""));
                continue;
            }
            Resolved::One(m) => vec![m],
            Resolved::Ambiguous(c) => {
                scope.warnings.push(ambiguous(pattern, &c));
                c
            }
        };
        for m in matches {
            add(&mut scope, m, level);
        }
    }
    scope
}

/// How a `:level` suffix is read (Pi 1.6's `thinkingSuffix`).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Suffix {
    /// Not at all: the text is the whole reference.
    None,
    /// A level's name is the level; another suffix is warned of and left out.
    Lenient,
}

/// What a reference names.
enum Resolved<'a> {
    NotFound,
    One(&'a Model),
    /// Several providers' models, none preferred.
    Ambiguous(Vec<&'a Model>),
}

/// Pi 1.6's `splitThinkingSuffix`: `text` up to its last `:` and the level after it, when that
/// is a level's name.
fn split_thinking_suffix(text: &str) -> Option<(&str, ThinkingLevel)> {
    let (base, suffix) = text.rsplit_once(':')?;
    Some((base, ThinkingLevel::parse(suffix)?))
}

/// Pi 1.6's `splitProviderPrefix`: the longest provider of `models` that `text` starts with,
/// followed by `/` and a non-empty rest (case ignored, spaces around the parts trimmed): the
/// provider and the rest.
fn split_provider_prefix<'a, 'm>(text: &'a str, models: &'m [Model]) -> Option<(&'m str, &'a str)> {
    let lower = text.to_lowercase();
    let mut best: Option<(&str, &str)> = None;
    for m in models {
        let prefix = m.provider.trim().to_lowercase();
        if prefix.is_empty() || best.is_some_and(|(p, _)| p.len() >= m.provider.len()) {
            continue;
        }
        let Some(slash) = lower
            .get(prefix.len()..)
            .and_then(|rest| rest.find('/'))
            .map(|i| i + prefix.len())
        else {
            continue;
        };
        if lower[..slash].trim() != prefix {
            continue;
        }
        let rest = text.get(slash + 1..).map(str::trim).unwrap_or_default();
        if !rest.is_empty() {
            best = Some((m.provider.as_str(), rest));
        }
    }
    best
}

/// Pi 1.6's `resolveModelReference` for a scope (every model usable): its `resolveText`.
fn resolve_reference<'m>(
    text: &str,
    models: &'m [Model],
    suffix: Suffix,
    fuzzy: bool,
) -> Resolved<'m> {
    let text = text.trim();
    if text.is_empty() {
        return Resolved::NotFound;
    }
    resolve_text(text, models, suffix, fuzzy).0
}

/// Pi 1.6's `resolveText`: what `text` names, the level of its suffix, a warning.
fn resolve_text<'m>(
    text: &str,
    models: &'m [Model],
    suffix: Suffix,
    fuzzy: bool,
) -> (Resolved<'m>, Option<ThinkingLevel>, Option<String>) {
    if text.is_empty() {
        return (Resolved::NotFound, None, None);
    }
    if let Some(r) = select_reference(text, models, fuzzy) {
        return (r, None, None);
    }
    if fuzzy {
        if let Some(r) = select_fuzzy(fuzzy_matches(text, models)) {
            return (r, None, None);
        }
    }
    if suffix == Suffix::None {
        return (Resolved::NotFound, None, None);
    }
    if let Some((base, level)) = split_thinking_suffix(text) {
        let (inner, _, warning) = resolve_text(base, models, suffix, fuzzy);
        if matches!(inner, Resolved::NotFound) {
            return (inner, None, warning);
        }
        // Pi: the level only when the inner reference gave no warning.
        let level = warning.is_none().then_some(level);
        return (inner, level, warning);
    }
    let Some((base, bad)) = text.rsplit_once(':') else {
        return (Resolved::NotFound, None, None);
    };
    let (inner, _, _) = resolve_text(base, models, suffix, fuzzy);
    if matches!(inner, Resolved::NotFound) {
        return (inner, None, None);
    }
    let warning =
        format!("Invalid thinking level \"{bad}\" in pattern \"{text}\". Using default instead.");
    (inner, None, Some(warning))
}

/// Pi 1.6's `selectReference` with every provider usable: the named provider's model of
/// `provider/id` (its fuzzy match when `fuzzy`), else the models whose id is `text`.
fn select_reference<'m>(text: &str, models: &'m [Model], fuzzy: bool) -> Option<Resolved<'m>> {
    let lower = text.to_lowercase();
    let raw: Vec<&Model> = models
        .iter()
        .filter(|m| m.id.to_lowercase() == lower)
        .collect();
    let named = split_provider_prefix(text, models).and_then(|(provider, rest)| {
        let of_provider = || models.iter().filter(move |m| m.provider == provider);
        let rest_lower = rest.to_lowercase();
        of_provider()
            .find(|m| m.id.to_lowercase() == rest_lower)
            .or_else(|| raw.iter().copied().find(|m| m.provider == provider))
            .or_else(|| {
                fuzzy
                    .then(|| best_fuzzy_match(&fuzzy_matches(rest, of_provider())))
                    .flatten()
            })
    });
    // Every provider counts as usable in a scope: a named model is the answer.
    if let Some(m) = named {
        return Some(Resolved::One(m));
    }
    match raw.first() {
        None => None,
        Some(&first) if raw.iter().all(|m| m.provider == first.provider) => {
            Some(Resolved::One(first))
        }
        Some(_) => Some(Resolved::Ambiguous(raw)),
    }
}

/// Pi 1.6's `fuzzyMatches`: the models whose id or name contains `text`, case ignored.
fn fuzzy_matches<'m>(text: &str, models: impl IntoIterator<Item = &'m Model>) -> Vec<&'m Model> {
    let lower = text.to_lowercase();
    models
        .into_iter()
        .filter(|m| m.id.to_lowercase().contains(&lower) || m.name.to_lowercase().contains(&lower))
        .collect()
}

/// Pi 1.6's `selectFuzzy` with every provider usable: the best match, or the providers' models
/// tied on its id.
fn select_fuzzy(matches: Vec<&Model>) -> Option<Resolved<'_>> {
    let best = best_fuzzy_match(&matches)?;
    let tied: Vec<&Model> = matches
        .iter()
        .copied()
        .filter(|m| m.id == best.id)
        .collect();
    if tied.iter().all(|m| m.provider == tied[0].provider) {
        Some(Resolved::One(best))
    } else {
        Some(Resolved::Ambiguous(tied))
    }
}

/// Pi 1.6's `bestFuzzyMatch`: among the aliases (ids ending in `-latest` or not in a `-` and
/// eight digits) when there are any, else all, the greatest id (Pi compares with
/// `localeCompare`; here case ignored, then as written).
fn best_fuzzy_match<'m>(matches: &[&'m Model]) -> Option<&'m Model> {
    let is_alias = |id: &str| {
        id.ends_with("-latest") || {
            let b = id.as_bytes();
            !(b.len() >= 9
                && b[b.len() - 9] == b'-'
                && b[b.len() - 8..].iter().all(u8::is_ascii_digit))
        }
    };
    let aliases: Vec<&Model> = matches
        .iter()
        .copied()
        .filter(|m| is_alias(&m.id))
        .collect();
    let pool = if aliases.is_empty() {
        matches
    } else {
        &aliases[..]
    };
    let key = |m: &Model| (m.id.to_lowercase(), m.id.clone());
    // The greatest; of equal ids the first, as Pi's stable sort keeps it.
    let mut best: Option<&Model> = None;
    for &m in pool {
        if best.is_none_or(|b| key(m) > key(b)) {
            best = Some(m);
        }
    }
    best
}

/// The models whose `provider/id` or id the glob `pattern` matches (case ignored; `*` and `?`
/// stop at `/`); none for a pattern that is not a glob.
fn glob_matches<'m>(pattern: &str, models: &'m [Model]) -> Vec<&'m Model> {
    let Ok(glob) = GlobBuilder::new(pattern)
        .case_insensitive(true)
        .literal_separator(true)
        .build()
    else {
        return Vec::new();
    };
    let matcher = glob.compile_matcher();
    models
        .iter()
        .filter(|m| matcher.is_match(format!("{}/{}", m.provider, m.id)) || matcher.is_match(&m.id))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn model(provider: &str, id: &str) -> Model {
        Model {
            name: id.to_string(),
            ..Model::new(pi_ai::models::SCRIPTED_API, provider, id, "")
        }
    }

    fn ids(scope: &ModelScope) -> Vec<(String, Option<ThinkingLevel>)> {
        scope
            .models
            .iter()
            .map(|s| (s.model.full_id(), s.thinking_level))
            .collect()
    }

    /// Pi 1.6's `resolveModelScopeFromModels` pattern by pattern: `provider/id`, a bare id, a
    /// `:level` suffix, globs over `provider/id` and over ids, a fuzzy part of an id (the
    /// alias before the dated id), an id on two providers (both, warned), a bad level (warned,
    /// left out), a pattern naming nothing (warned), repeats added once.
    #[test]
    fn patterns_resolve_as_pi_1_6_resolves_them() {
        let models = [
            model("t", "m1"),
            model("t", "m2"),
            model("a", "am1"),
            model("a", "claude-sonnet-4-5"),
            model("a", "claude-sonnet-4-5-20250929"),
            model("b", "m1"),
        ];
        let p = |list: &[&str]| {
            resolve_scope(
                &list.iter().map(|s| s.to_string()).collect::<Vec<_>>(),
                &models,
            )
        };
        let s = p(&["t/m1", "a/am1", "t/m1"]);
        assert_eq!(ids(&s), [("t/m1".into(), None), ("a/am1".into(), None)]);
        assert!(s.warnings.is_empty());
        let s = p(&["am1:high", "t/*", "*sonnet*:low", "sonnet"]);
        assert_eq!(
            ids(&s),
            [
                ("a/am1".into(), Some(ThinkingLevel::High)),
                ("t/m1".into(), None),
                ("t/m2".into(), None),
                ("a/claude-sonnet-4-5".into(), Some(ThinkingLevel::Low)),
                (
                    "a/claude-sonnet-4-5-20250929".into(),
                    Some(ThinkingLevel::Low)
                ),
            ]
        );
        let s = p(&["m1", "am1:fast", "nothing"]);
        assert_eq!(
            ids(&s),
            [
                ("t/m1".into(), None),
                ("b/m1".into(), None),
                ("a/am1".into(), None)
            ]
        );
        assert_eq!(
            s.warnings,
            [
                "Pattern \"m1\" matches several providers: b, t. Use provider/id to choose one.",
                "Invalid thinking level \"fast\" in pattern \"am1:fast\". Using default instead.",
                "No models match pattern \"nothing\"",
            ]
        );
        let s = p(&["sonnet"]);
        assert_eq!(ids(&s), [("a/claude-sonnet-4-5".into(), None)]);
    }

    /// Pi 1.6's `getNextCycleIndex`.
    #[test]
    fn cycling_wraps_and_starts_where_pi_starts() {
        assert_eq!(next_cycle_index(Some(1), 3, false), Some(2));
        assert_eq!(next_cycle_index(Some(2), 3, false), Some(0));
        assert_eq!(next_cycle_index(Some(0), 3, true), Some(2));
        assert_eq!(next_cycle_index(None, 3, false), Some(0));
        assert_eq!(next_cycle_index(None, 3, true), Some(2));
        assert_eq!(next_cycle_index(None, 1, false), Some(0));
        assert_eq!(next_cycle_index(Some(0), 1, false), None);
        assert_eq!(next_cycle_index(None, 0, false), None);
    }
}
