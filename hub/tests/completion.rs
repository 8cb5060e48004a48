//! `fleetbus completion bash|zsh|fish`: the scripts load in their shell and
//! complete fleetbus's own subcommands (bash is driven as its completion
//! machinery drives it: COMP_WORDS/COMP_CWORD, then COMPREPLY read back).
#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::process::Command;

fn completion(shell: &str) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_fleetbus"))
        .args(["completion", shell])
        .output()
        .expect("run fleetbus completion")
}

/// What bash's completion offers for `fleetbus <words…>` with the cursor on the last word.
fn bash_completes(words: &[&str]) -> Vec<String> {
    let script = completion("bash");
    assert!(script.status.success(), "{script:?}");
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("fleetbus.bash");
    std::fs::write(&path, &script.stdout).unwrap();
    let quoted: Vec<String> = words.iter().map(|w| format!("'{w}'")).collect();
    let driver = format!(
        "source {}; COMP_WORDS=(fleetbus {}); COMP_CWORD={}; COMP_LINE=\"${{COMP_WORDS[*]}}\"; \
         COMP_POINT=${{#COMP_LINE}}; _fleetbus fleetbus '{}' '{}'; printf '%s\\n' \"${{COMPREPLY[@]}}\"",
        path.display(),
        quoted.join(" "),
        words.len(),
        words.last().unwrap(),
        if words.len() > 1 { words[words.len() - 2] } else { "fleetbus" },
    );
    let out = Command::new("bash")
        .args(["-c", &driver])
        .output()
        .expect("run bash");
    assert!(
        out.status.success(),
        "bash: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .map(str::to_owned)
        .collect()
}

#[test]
fn bash_completes_subcommands_and_their_verbs() {
    let top = bash_completes(&[""]);
    for sub in ["mesh", "drift", "clusters", "completion"] {
        assert!(top.contains(&sub.to_owned()), "{sub} not offered: {top:?}");
    }
    assert_eq!(bash_completes(&["clu"]), vec!["clusters".to_owned()]);
    let verbs = bash_completes(&["clusters", ""]);
    for verb in ["ls", "label", "progress"] {
        assert!(
            verbs.contains(&verb.to_owned()),
            "{verb} not offered: {verbs:?}"
        );
    }
    let shells = bash_completes(&["completion", ""]);
    for shell in ["bash", "zsh", "fish"] {
        assert!(shells.contains(&shell.to_owned()), "{shell}: {shells:?}");
    }
}

#[test]
fn zsh_and_fish_scripts_name_the_commands() {
    let zsh = completion("zsh");
    assert!(zsh.status.success());
    let zsh = String::from_utf8_lossy(&zsh.stdout);
    assert!(zsh.starts_with("#compdef fleetbus"), "{zsh}");
    assert!(zsh.contains("clusters"), "{zsh}");
    let fish = completion("fish");
    assert!(fish.status.success());
    let fish = String::from_utf8_lossy(&fish.stdout);
    assert!(fish.contains("complete -c fleetbus"), "{fish}");
    assert!(fish.contains("drift"), "{fish}");
}

#[test]
fn an_unknown_shell_is_a_usage_error() {
    let out = completion("tcsh");
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("invalid value 'tcsh'"), "{err}");
    assert!(err.contains("bash"), "names the shells it knows: {err}");
}
