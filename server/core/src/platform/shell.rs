//! The shell the `bash` tool (and the user's `!command`) runs commands with: Pi 1.6's
//! `getShellConfig` (`utils/shell.js`), in its order.
//!
//! 1. `shellPath` from the global settings (`<agent dir>/settings.json`), when set: used if
//!    it exists, else the error `Custom shell path not found: <path>`. Only the global file is
//!    read: a project's `.pi/settings.json` cannot choose the program that runs commands.
//! 2. Windows: Git Bash at `%ProgramFiles%\Git\bin\bash.exe`, then
//!    `%ProgramFiles(x86)%\Git\bin\bash.exe`; then the first `bash.exe` in a `PATH` folder
//!    (Cygwin, MSYS2; Pi asks `where`, which also looks in the current folder first); else an
//!    error naming the options and every place checked. The legacy WSL launcher
//!    (`%SystemRoot%\System32\bash.exe`, or `Sysnative`) gets the command on stdin (`bash -s`),
//!    as Pi does.
//! 3. Linux, macOS: `/bin/bash`, then `bash` in a `PATH` folder, then `sh`.
//!
//! The search is OS-neutral code over a given environment ([`find_in`]), so its Windows order
//! is tested on every OS with a faked one; [`find`] applies it to this process.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

/// Which OS's rules [`find_in`] follows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Os {
    /// Linux, macOS and the other Unixes.
    Unix,
    /// Windows.
    Windows,
}

impl Os {
    /// The OS this binary was built for.
    pub fn current() -> Os {
        if cfg!(windows) {
            Os::Windows
        } else {
            Os::Unix
        }
    }
}

/// How to run a command string.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Shell {
    /// The shell program.
    pub program: PathBuf,
    /// Its arguments before the command (`["-c"]`, or `["-s"]` for the WSL launcher).
    pub args: Vec<String>,
    /// The command goes to the shell's stdin instead of after `args` (legacy WSL `bash.exe`).
    pub command_on_stdin: bool,
}

impl Shell {
    fn bash(program: PathBuf, os: Os, env: &dyn Fn(&str) -> Option<OsString>) -> Shell {
        let wsl = os == Os::Windows && is_legacy_wsl_bash(&program, env);
        Shell {
            program,
            args: vec![if wsl { "-s" } else { "-c" }.into()],
            command_on_stdin: wsl,
        }
    }

    /// A command running `command` with this shell (stdin still to be set up by the caller;
    /// with [`Shell::command_on_stdin`] it must be piped and given `command`).
    pub fn command(&self, command: &str) -> tokio::process::Command {
        let mut cmd = tokio::process::Command::new(&self.program);
        cmd.args(&self.args);
        if !self.command_on_stdin {
            cmd.arg(command);
        }
        cmd
    }
}

/// `%SystemRoot%\System32\bash.exe` or `…\Sysnative\bash.exe` (case-insensitive).
fn is_legacy_wsl_bash(path: &Path, env: &dyn Fn(&str) -> Option<OsString>) -> bool {
    let p = path.to_string_lossy().replace('/', "\\").to_lowercase();
    let root = env("SystemRoot")
        .map(|r| {
            r.to_string_lossy()
                .trim_end_matches(['\\', '/'])
                .to_lowercase()
        })
        .unwrap_or_else(|| "c:\\windows".into());
    ["system32", "sysnative"]
        .iter()
        .any(|d| p == format!("{root}\\{d}\\bash.exe"))
}

/// The shell for this process: [`find_in`] with its environment and file system, and
/// `shellPath` from the global settings.
///
/// Errors: as [`find_in`].
pub fn find() -> Result<Shell, String> {
    let shell_path = shell_path_setting();
    find_in(
        Os::current(),
        shell_path.as_deref(),
        &|k| std::env::var_os(k),
        &|p| p.is_file(),
    )
}

/// `shellPath` of the global settings file, if it is a non-empty string.
pub fn shell_path_setting() -> Option<PathBuf> {
    let dir = pi_ai::models::agent_dir()?;
    let files = crate::settings::SettingsFiles {
        global: Some(dir.join("settings.json")),
        project: None,
    };
    crate::settings::Settings::load(&files)
        .raw("shellPath")
        .and_then(|v| v.as_str())
        .filter(|s| !s.is_empty())
        .map(PathBuf::from)
}

/// The shell by Pi's rules for `os` (module doc), reading variables through `env` and
/// checking candidates with `exists`.
///
/// Errors: `shell_path` given but missing (`Custom shell path not found: …`); on Windows, no
/// bash anywhere (the text names the options and every place checked).
pub fn find_in(
    os: Os,
    shell_path: Option<&Path>,
    env: &dyn Fn(&str) -> Option<OsString>,
    exists: &dyn Fn(&Path) -> bool,
) -> Result<Shell, String> {
    if let Some(p) = shell_path {
        if exists(p) {
            return Ok(Shell::bash(p.to_path_buf(), os, env));
        }
        return Err(format!("Custom shell path not found: {}", p.display()));
    }
    match os {
        Os::Windows => {
            let mut checked = Vec::new();
            for var in ["ProgramFiles", "ProgramFiles(x86)"] {
                if let Some(dir) = env(var) {
                    let p = format!("{}\\Git\\bin\\bash.exe", dir.to_string_lossy());
                    checked.push(p);
                }
            }
            for p in &checked {
                if exists(Path::new(p)) {
                    return Ok(Shell::bash(PathBuf::from(p), os, env));
                }
            }
            if let Some(p) = on_path(os, "bash.exe", env, exists) {
                return Ok(Shell::bash(p, os, env));
            }
            Err(format!(
                "No bash shell found. Options:\n  1. Install Git for Windows: https://git-scm.com/download/win\n  2. Add your bash to PATH (Cygwin, MSYS2, etc.)\n  3. Set shellPath in settings.json\n\nSearched Git Bash in:\n{}\nand bash.exe in every PATH folder",
                checked
                    .iter()
                    .map(|p| format!("  {p}"))
                    .collect::<Vec<_>>()
                    .join("\n")
            ))
        }
        Os::Unix => {
            let bin = Path::new("/bin/bash");
            if exists(bin) {
                return Ok(Shell::bash(bin.to_path_buf(), os, env));
            }
            if let Some(p) = on_path(os, "bash", env, exists) {
                return Ok(Shell::bash(p, os, env));
            }
            Ok(Shell {
                program: PathBuf::from("sh"),
                args: vec!["-c".into()],
                command_on_stdin: false,
            })
        }
    }
}

/// The first `name` in a `PATH` folder (`;`-separated on Windows, `:` elsewhere).
fn on_path(
    os: Os,
    name: &str,
    env: &dyn Fn(&str) -> Option<OsString>,
    exists: &dyn Fn(&Path) -> bool,
) -> Option<PathBuf> {
    let path = env("PATH").or_else(|| env("Path"))?;
    let path = path.to_string_lossy().into_owned();
    let (sep, slash) = match os {
        Os::Windows => (';', '\\'),
        Os::Unix => (':', '/'),
    };
    path.split(sep)
        .filter(|d| !d.is_empty())
        .map(|d| {
            let d = d.trim_matches('"').trim_end_matches(['\\', '/']);
            PathBuf::from(format!("{d}{slash}{name}"))
        })
        .find(|p| exists(p))
}

/// The shell the platform tests run (`sh -c` on Unix; bash by [`find`] on Windows).
#[cfg(test)]
pub(crate) fn test_shell() -> (PathBuf, Vec<String>) {
    if cfg!(windows) {
        let s = find().unwrap_or_else(|e| panic!("{e}"));
        (s.program, s.args)
    } else {
        (PathBuf::from("sh"), vec!["-c".into()])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn env_of(vars: &[(&str, &str)]) -> impl Fn(&str) -> Option<OsString> {
        let m: HashMap<String, OsString> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), OsString::from(v)))
            .collect();
        move |k| m.get(k).cloned()
    }

    fn exists_of(files: &[&str]) -> impl Fn(&Path) -> bool {
        let set: Vec<PathBuf> = files.iter().map(PathBuf::from).collect();
        move |p| set.iter().any(|f| f == p)
    }

    fn c(p: &str) -> Shell {
        Shell {
            program: PathBuf::from(p),
            args: vec!["-c".into()],
            command_on_stdin: false,
        }
    }

    const WIN_ENV: &[(&str, &str)] = &[
        ("ProgramFiles", "C:\\Program Files"),
        ("ProgramFiles(x86)", "C:\\Program Files (x86)"),
        ("SystemRoot", "C:\\Windows"),
        (
            "PATH",
            "C:\\Windows\\System32;C:\\msys64\\usr\\bin\\;\"C:\\tools\\cygwin\\bin\"",
        ),
    ];

    #[test]
    fn windows_order_is_pis() {
        let env = env_of(WIN_ENV);
        let git = "C:\\Program Files\\Git\\bin\\bash.exe";
        let git86 = "C:\\Program Files (x86)\\Git\\bin\\bash.exe";
        let msys = "C:\\msys64\\usr\\bin\\bash.exe";
        let cyg = "C:\\tools\\cygwin\\bin\\bash.exe";
        let find = |files: &[&str], sp: Option<&str>| {
            find_in(Os::Windows, sp.map(Path::new), &env, &exists_of(files))
        };
        // shellPath first, then Git Bash (64-bit, then x86), then PATH in order.
        assert_eq!(
            find(&[git, cyg, "D:\\bash.exe"], Some("D:\\bash.exe")),
            Ok(c("D:\\bash.exe"))
        );
        assert_eq!(find(&[git, git86, msys], None), Ok(c(git)));
        assert_eq!(find(&[git86, msys], None), Ok(c(git86)));
        assert_eq!(find(&[cyg, msys], None), Ok(c(msys)));
        assert_eq!(find(&[cyg], None), Ok(c(cyg)));
        // A shellPath that is not there is an error, not a fallback.
        assert_eq!(
            find(&[git], Some("D:\\nope\\bash.exe")),
            Err("Custom shell path not found: D:\\nope\\bash.exe".into())
        );
        // Nothing at all: the error names every place checked.
        assert_eq!(
            find(&[], None),
            Err("No bash shell found. Options:\n  1. Install Git for Windows: https://git-scm.com/download/win\n  2. Add your bash to PATH (Cygwin, MSYS2, etc.)\n  3. Set shellPath in settings.json\n\nSearched Git Bash in:\n  C:\\Program Files\\Git\\bin\\bash.exe\n  C:\\Program Files (x86)\\Git\\bin\\bash.exe\nand bash.exe in every PATH folder".into())
        );
        // The legacy WSL launcher gets the command on stdin.
        let wsl = "C:\\Windows\\System32\\bash.exe";
        assert_eq!(
            find(&[wsl], None),
            Ok(Shell {
                program: PathBuf::from(wsl),
                args: vec!["-s".into()],
                command_on_stdin: true,
            })
        );
    }

    #[test]
    fn unix_order_is_pis() {
        let env = env_of(&[("PATH", "/usr/local/bin:/opt/bin")]);
        let find = |files: &[&str], sp: Option<&str>| {
            find_in(Os::Unix, sp.map(Path::new), &env, &exists_of(files))
        };
        assert_eq!(
            find(&["/bin/bash", "/opt/zsh"], Some("/opt/zsh")),
            Ok(c("/opt/zsh"))
        );
        assert_eq!(
            find(&["/bin/bash", "/opt/bin/bash"], None),
            Ok(c("/bin/bash"))
        );
        assert_eq!(find(&["/opt/bin/bash"], None), Ok(c("/opt/bin/bash")));
        assert_eq!(find(&[], None), Ok(c("sh")));
        assert_eq!(
            find(&[], Some("/nope")),
            Err("Custom shell path not found: /nope".into())
        );
    }

    #[test]
    fn this_machine_has_a_shell_that_runs_a_command() {
        let shell = find().unwrap();
        let out = std::process::Command::new(&shell.program)
            .args(&shell.args)
            .arg("echo ok")
            .output()
            .unwrap();
        assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "ok");
    }
}
