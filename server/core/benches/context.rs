//! Bench: what each prompt pays for configuration. A workspace with settings files, context
//! files in three folders, 20 global and 20 project skills, 20 global and 20 project prompt
//! templates. Measures, as median per call over 10 runs: `WorkspaceConfig::settings` when no
//! file changed (the per-prompt mtime check), a reload after a change, `resources()` (every
//! file and folder re-read) and the whole system prompt with the default tools.
//! Run: `cargo bench -p pi-core --bench context`.
#![allow(clippy::unwrap_used, clippy::print_stdout)]

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use pi_core::fs::DiskFs;
use pi_core::resources::WorkspaceConfig;
use pi_core::tools::default_tools;

fn write(path: &Path, text: &str) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, text).unwrap();
}

fn median(mut runs: Vec<Duration>) -> Duration {
    runs.sort();
    runs[runs.len() / 2]
}

fn per_call(n: u32, mut f: impl FnMut()) -> Duration {
    median(
        (0..10)
            .map(|_| {
                let t = Instant::now();
                for _ in 0..n {
                    f();
                }
                t.elapsed() / n
            })
            .collect(),
    )
}

fn main() {
    let root = std::env::temp_dir().join(format!("pi-core-bench-context-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    let ws = root.join("ws");
    let agent = root.join("agent");
    write(
        &agent.join("settings.json"),
        r#"{"defaultProvider": "anthropic", "compaction": {"enabled": true}}"#,
    );
    write(
        &ws.join(".pi/settings.json"),
        r#"{"retry": {"maxRetries": 2}, "allowedDirs": ["../.."]}"#,
    );
    write(&agent.join("AGENTS.md"), &"Global rule.\n".repeat(50));
    write(&root.join("AGENTS.md"), &"Parent rule.\n".repeat(50));
    write(&ws.join("AGENTS.md"), &"Project rule.\n".repeat(200));
    for i in 0..20 {
        for (base, scope) in [(&agent, "global"), (&ws.join(".pi"), "project")] {
            write(
                &base.join(format!("skills/{scope}-skill-{i}/SKILL.md")),
                &format!(
                    "---\nname: {scope}-skill-{i}\ndescription: Skill {i} of {scope}.\n---\n{}",
                    "Body.\n".repeat(100)
                ),
            );
            write(
                &base.join(format!("prompts/{scope}-t{i}.md")),
                &format!("---\ndescription: Template {i}\n---\nDo $1 with $@.\n"),
            );
        }
    }
    let cfg = WorkspaceConfig::new(ws.clone(), Some(agent.clone()), true);
    let tools = default_tools(Arc::new(DiskFs::new(ws.clone())), None);

    let settings = per_call(10_000, || {
        let _ = cfg.settings();
    });
    let mut flip = false;
    let reload = per_call(200, || {
        flip = !flip;
        let text = if flip {
            r#"{"retry": {"maxRetries": 22}}"#
        } else {
            r#"{"retry": {"maxRetries": 2}}"#
        };
        std::fs::write(ws.join(".pi/settings.json"), text).unwrap();
        let _ = cfg.settings();
    });
    let resources = per_call(200, || {
        let r = cfg.resources();
        assert_eq!((r.skills.len(), r.prompt_templates.len()), (40, 40));
    });
    let mut len = 0;
    let prompt = per_call(200, || {
        let r = cfg.resources();
        len = pi_core::prompt::system_prompt(&ws, &tools, &r, &[]).len();
    });
    println!("settings, unchanged files (2 stats):   {settings:?} per prompt");
    println!("settings, after a change (write+load): {reload:?}");
    println!("resources (3 context files, 40 skills, 40 templates): {resources:?} per prompt");
    println!("system prompt incl. resources ({len} bytes):           {prompt:?} per prompt");
    std::fs::remove_dir_all(&root).unwrap();
}
