//! `fleetbus mesh up|status|down` with real nats-server, devcluster and agent
//! processes (needs `cargo build --workspace` for the devcluster and agent binaries).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use fleetbus_hub::{process_is_alive, MeshState, ProcRecord};
use fleetbus_testsupport::{cargo_bin, nats_server_bin, upstream_crds, wait_for_blocking};

fn fleetbus(dir: &Path, args: &[&str]) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_fleetbus"));
    cmd.args(args)
        .arg("--dir")
        .arg(dir)
        .env("FLEETBUS_NATS_SERVER", nats_server_bin())
        .env("FLEETBUS_DEVCLUSTER_BIN", cargo_bin("fleetbus-devcluster"))
        .env("FLEETBUS_AGENT_BIN", cargo_bin("fleetbus-agent"))
        .env("FLEETBUS_UPSTREAM_CRDS", upstream_crds())
        .stdin(Stdio::null());
    cmd
}

fn text(out: &Output) -> String {
    format!(
        "status {}\n--- stdout ---\n{}\n--- stderr ---\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// Every log under the mesh dir, for failure messages.
fn logs(dir: &Path) -> String {
    let mut out = String::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let p = e.path();
            if p.is_dir() && !p.ends_with("data") && !p.ends_with("nats") {
                stack.push(p);
            } else if p.extension().is_some_and(|x| x == "log") {
                let tail: String = std::fs::read_to_string(&p).unwrap_or_default();
                let start = tail.len().saturating_sub(3000);
                let start = (start..tail.len())
                    .find(|&i| tail.is_char_boundary(i))
                    .unwrap_or(0);
                out += &format!("\n--- {} ---\n{}", p.display(), &tail[start..]);
            }
        }
    }
    out
}

fn all_processes(state: &MeshState) -> Vec<(String, ProcRecord)> {
    state.processes_in_stop_order()
}

/// Stops a mesh left behind by a failing test, so no process outlives it.
struct DownOnDrop(PathBuf);

impl Drop for DownOnDrop {
    fn drop(&mut self) {
        if MeshState::path(&self.0).exists() {
            let _ = fleetbus(&self.0, &["mesh", "down"]).output();
        }
    }
}

#[test]
fn detached_mesh_comes_up_reports_status_and_goes_down() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("mesh");
    let _guard = DownOnDrop(dir.clone());

    let up = fleetbus(
        &dir,
        &[
            "mesh",
            "up",
            "--clusters",
            "2",
            "--detach",
            "--ready-timeout",
            "90",
        ],
    )
    .output()
    .unwrap();
    assert!(up.status.success(), "{}{}", text(&up), logs(&dir));
    let stdout = String::from_utf8_lossy(&up.stdout);
    for line in [
        "ok  nats-server",
        "ok  a/devcluster",
        "ok  b/devcluster",
        "ok  a/agent",
        "ok  b/agent",
        "ok  upstream CRDs",
    ] {
        assert!(stdout.contains(line), "missing {line:?}: {}", text(&up));
    }
    assert!(
        stdout.contains("get clusters.fleetbus.io"),
        "tour: {stdout}"
    );

    let state = MeshState::read(&dir).unwrap();
    assert!(
        state.supervisor.is_none(),
        "detached mesh has no supervisor"
    );
    assert_eq!(
        state
            .clusters
            .iter()
            .map(|c| c.name.as_str())
            .collect::<Vec<_>>(),
        ["a", "b"]
    );
    let procs = all_processes(&state);
    assert_eq!(procs.len(), 5, "{procs:?}");
    for (what, p) in &procs {
        assert!(
            process_is_alive(p),
            "{what} not running after `up` returned{}",
            logs(&dir)
        );
    }

    let kubectl = Command::new("/usr/lib/google-cloud-sdk/bin/kubectl.1.33")
        .arg("--kubeconfig")
        .arg(&state.clusters[0].kubeconfig)
        .args(["get", "ns", "-o", "name"])
        .output()
        .unwrap();
    assert!(kubectl.status.success(), "{}", text(&kubectl));
    // The SIG Multicluster standards are served in a member: their CRDs were
    // installed from the upstream files before its agent started.
    let served = Command::new("/usr/lib/google-cloud-sdk/bin/kubectl.1.33")
        .arg("--kubeconfig")
        .arg(&state.clusters[1].kubeconfig)
        .args([
            "get",
            "clusterprofiles.multicluster.x-k8s.io,serviceexports.multicluster.x-k8s.io",
            "--all-namespaces",
        ])
        .output()
        .unwrap();
    assert!(served.status.success(), "{}{}", text(&served), logs(&dir));

    let status = fleetbus(&dir, &["mesh", "status"]).output().unwrap();
    assert!(status.status.success(), "{}{}", text(&status), logs(&dir));
    let status_out = String::from_utf8_lossy(&status.stdout);
    assert!(
        status_out.contains("a/agent: ready") && status_out.contains("b/agent: ready"),
        "{}",
        text(&status)
    );

    // One cluster stopped (killed) and started again, with its data.
    let stop = fleetbus(&dir, &["mesh", "stop", "b"]).output().unwrap();
    assert!(stop.status.success(), "{}", text(&stop));
    let b_procs: Vec<_> = procs.iter().filter(|(w, _)| w.starts_with("b/")).collect();
    assert_eq!(b_procs.len(), 2, "{procs:?}");
    for (what, p) in &b_procs {
        // SIGKILL is delivered at once; the process is gone when reaped by init.
        let gone = (0..50).any(|_| {
            let alive = process_is_alive(p);
            if alive {
                std::thread::sleep(std::time::Duration::from_millis(100));
            }
            !alive
        });
        assert!(gone, "{what} survived `mesh stop b`");
    }
    let status = fleetbus(&dir, &["mesh", "status"]).output().unwrap();
    assert!(
        String::from_utf8_lossy(&status.stdout).contains("stopped"),
        "{}",
        text(&status)
    );
    let bad = fleetbus(&dir, &["mesh", "start", "nosuch"])
        .output()
        .unwrap();
    assert_eq!(bad.status.code(), Some(1), "{}", text(&bad));
    assert!(
        String::from_utf8_lossy(&bad.stderr).contains("no cluster"),
        "{}",
        text(&bad)
    );
    let start = fleetbus(&dir, &["mesh", "start", "b"]).output().unwrap();
    assert!(start.status.success(), "{}{}", text(&start), logs(&dir));
    let twice = fleetbus(&dir, &["mesh", "start", "b"]).output().unwrap();
    assert_eq!(twice.status.code(), Some(1), "{}", text(&twice));
    let status = fleetbus(&dir, &["mesh", "status"]).output().unwrap();
    assert!(status.status.success(), "{}{}", text(&status), logs(&dir));
    assert!(
        String::from_utf8_lossy(&status.stdout).contains("b/agent: ready"),
        "{}",
        text(&status)
    );
    let restarted = MeshState::read(&dir).unwrap();
    assert!(!restarted.clusters[1].stopped);
    let procs = all_processes(&restarted);

    let again = fleetbus(&dir, &["mesh", "up", "--clusters", "1", "--detach"])
        .output()
        .unwrap();
    assert_eq!(again.status.code(), Some(1), "{}", text(&again));
    assert!(
        String::from_utf8_lossy(&again.stderr).contains("already running"),
        "{}",
        text(&again)
    );

    let down = fleetbus(&dir, &["mesh", "down"]).output().unwrap();
    assert!(down.status.success(), "{}", text(&down));
    for (what, p) in &procs {
        assert!(
            !process_is_alive(p),
            "{what} (pid {}) survived `mesh down`",
            p.pid
        );
    }
    assert!(!MeshState::path(&dir).exists(), "state file removed");

    let status = fleetbus(&dir, &["mesh", "status"]).output().unwrap();
    assert_eq!(status.status.code(), Some(1), "{}", text(&status));
    assert!(
        String::from_utf8_lossy(&status.stderr).contains("no mesh state"),
        "{}",
        text(&status)
    );
}

#[test]
fn foreground_mesh_stops_in_order_on_sigint() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("mesh");
    let _guard = DownOnDrop(dir.clone());
    let out_path = tmp.path().join("up.out");
    // The open mesh of old (`--insecure`) stays available; so does a mesh
    // without the upstream CRDs.
    let no_crds = tmp.path().join("no-crds");
    let mut up = spawn_foreground(
        &dir,
        &out_path,
        &["mesh", "up", "--clusters", "1", "--insecure"],
        &[("FLEETBUS_UPSTREAM_CRDS", &no_crds)],
    );
    let output = || std::fs::read_to_string(&out_path).unwrap_or_default();
    wait_for_blocking(
        "the foreground mesh to be up",
        Duration::from_secs(120),
        || {
            if let Ok(Some(status)) = up.try_wait() {
                panic!(
                    "mesh up exited early ({status}):\n{}{}",
                    output(),
                    logs(&dir)
                );
            }
            if output().contains("Press Ctrl-C") {
                Ok(())
            } else {
                Err(output())
            }
        },
    );
    let state = MeshState::read(&dir).unwrap();
    let supervisor = state
        .supervisor
        .clone()
        .expect("foreground mesh records its supervisor");
    assert_eq!(supervisor.pid, up.id());
    let procs = all_processes(&state);
    assert_eq!(procs.len(), 3, "{procs:?}");
    assert!(state.security.is_none());
    assert!(state.nats.as_ref().unwrap().url.starts_with("nats://"));
    assert!(output().contains("Insecure (--insecure)"), "{}", output());
    // Said once, naming the directory and what stays inactive.
    let err = std::fs::read_to_string(out_path.with_extension("err")).unwrap();
    assert_eq!(
        err.matches("no upstream SIG Multicluster CRDs").count(),
        1,
        "{err}"
    );
    assert!(
        err.contains(&no_crds.display().to_string()) && err.contains("ServiceExport"),
        "{err}"
    );

    let killed = Command::new("kill")
        .args(["-INT", &up.id().to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    let status = wait_for_blocking(
        "mesh up to exit after SIGINT",
        Duration::from_secs(60),
        || up.try_wait().unwrap().ok_or_else(output),
    );
    assert!(status.success(), "{status}: {}", output());
    for (what, p) in &procs {
        assert!(
            !process_is_alive(p),
            "{what} (pid {}) survived Ctrl-C",
            p.pid
        );
    }
    let out = output();
    let agent = out
        .find("stopped a/agent")
        .unwrap_or_else(|| panic!("agent not stopped cleanly: {out}{}", logs(&dir)));
    let nats = out
        .find("stopped nats-server")
        .unwrap_or_else(|| panic!("nats not stopped cleanly: {out}"));
    assert!(agent < nats, "agents stop before NATS: {out}");
    assert!(!MeshState::path(&dir).exists(), "state file removed");
}

#[test]
fn up_fails_cleanly_when_an_agent_exits() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("mesh");
    let _guard = DownOnDrop(dir.clone());
    // A real program that exits at once, standing in for an agent that crashes on start.
    let up = fleetbus(&dir, &["mesh", "up", "--clusters", "1", "--detach"])
        .env("FLEETBUS_AGENT_BIN", "/bin/false")
        .output()
        .unwrap();
    assert_eq!(up.status.code(), Some(1), "{}", text(&up));
    assert!(
        String::from_utf8_lossy(&up.stderr).contains("a/agent exited"),
        "{}",
        text(&up)
    );
    assert!(
        !MeshState::path(&dir).exists(),
        "state file removed after a failed start"
    );
    let stdout = String::from_utf8_lossy(&up.stdout);
    assert!(
        stdout.contains("stopped a/devcluster") && stdout.contains("stopped nats-server"),
        "what had started is stopped: {}",
        text(&up)
    );
}

#[test]
fn invalid_names_are_usage_errors() {
    let tmp = tempfile::tempdir().unwrap();
    let many = (0..27)
        .map(|i| format!("c{i}"))
        .collect::<Vec<_>>()
        .join(",");
    for args in [
        &["mesh", "up", "--names", "Upper"][..],
        &["mesh", "up", "--names", "a,a"],
        &["mesh", "up", "--clusters", "2", "--names", "a"],
        // The same limit as --clusters (26).
        &["mesh", "up", "--names", &many],
        &["mesh", "up", "--clusters", "27"],
    ] {
        let out = fleetbus(tmp.path(), args).output().unwrap();
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", text(&out));
    }
    assert!(
        std::fs::read_dir(tmp.path()).unwrap().next().is_none(),
        "nothing started, nothing written"
    );
}

/// Runs `mesh up` in the foreground with its output in files; returns the child.
fn spawn_foreground(
    dir: &Path,
    out: &Path,
    args: &[&str],
    env: &[(&str, &Path)],
) -> std::process::Child {
    let mut cmd = fleetbus(dir, args);
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.stdout(std::fs::File::create(out).unwrap())
        .stderr(std::fs::File::create(out.with_extension("err")).unwrap())
        .spawn()
        .unwrap()
}

#[test]
fn down_stops_a_foreground_mesh_through_its_supervisor() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("mesh");
    let _guard = DownOnDrop(dir.clone());
    let out_path = tmp.path().join("up.out");
    let mut up = spawn_foreground(&dir, &out_path, &["mesh", "up", "--clusters", "1"], &[]);
    let output = || std::fs::read_to_string(&out_path).unwrap_or_default();
    wait_for_blocking(
        "the foreground mesh to be up",
        Duration::from_secs(120),
        || {
            if let Ok(Some(status)) = up.try_wait() {
                panic!(
                    "mesh up exited early ({status}):\n{}{}",
                    output(),
                    logs(&dir)
                );
            }
            if output().contains("Press Ctrl-C") {
                Ok(())
            } else {
                Err(output())
            }
        },
    );
    let procs = all_processes(&MeshState::read(&dir).unwrap());

    let down = fleetbus(&dir, &["mesh", "down"]).output().unwrap();
    assert!(down.status.success(), "{}", text(&down));
    assert!(
        String::from_utf8_lossy(&down.stdout).contains("asking the foreground"),
        "{}",
        text(&down)
    );
    let status = wait_for_blocking("mesh up to exit", Duration::from_secs(30), || {
        up.try_wait().unwrap().ok_or_else(output)
    });
    assert!(status.success(), "{status}: {}", output());
    assert!(
        output().contains("stopped a/agent"),
        "the supervisor stopped its mesh: {}",
        output()
    );
    for (what, p) in &procs {
        assert!(
            !process_is_alive(p),
            "{what} (pid {}) survived `mesh down`",
            p.pid
        );
    }
}

#[test]
fn ctrl_c_during_startup_stops_what_had_started() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("mesh");
    let _guard = DownOnDrop(dir.clone());
    // A real process that never becomes ready, standing in for a slow agent.
    let never_ready = tmp.path().join("never-ready-agent");
    std::fs::write(&never_ready, "#!/bin/sh\nexec sleep 300\n").unwrap();
    std::fs::set_permissions(
        &never_ready,
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    let out_path = tmp.path().join("up.out");
    let mut up = spawn_foreground(
        &dir,
        &out_path,
        &["mesh", "up", "--clusters", "1", "--ready-timeout", "300"],
        &[("FLEETBUS_AGENT_BIN", &never_ready)],
    );
    let state = wait_for_blocking("the agent to be launched", Duration::from_secs(60), || {
        match MeshState::read(&dir) {
            Ok(s) if s.clusters.first().is_some_and(|c| c.agent.is_some()) => Ok(s),
            other => Err(format!("{other:?}")),
        }
    });
    let procs = all_processes(&state);
    assert_eq!(procs.len(), 3, "{procs:?}");

    Command::new("kill")
        .args(["-INT", &up.id().to_string()])
        .status()
        .unwrap();
    let status = wait_for_blocking("mesh up to exit", Duration::from_secs(30), || {
        up.try_wait().unwrap().ok_or_else(|| "running".to_string())
    });
    assert_eq!(status.code(), Some(130), "interrupted start exits 130");
    for (what, p) in &procs {
        assert!(
            !process_is_alive(p),
            "{what} (pid {}) survived Ctrl-C during startup",
            p.pid
        );
    }
    assert!(!MeshState::path(&dir).exists(), "state file removed");
}

/// `fleetbus <args>` run from `cwd` as the README's tour runs it: no `--dir`,
/// the mesh in `./.fleetbus-mesh`, the URL from the environment.
fn tour_command(cwd: &Path, url: &str, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_fleetbus"))
        .args(args)
        .current_dir(cwd)
        .env("FLEETBUS_NATS_URL", url)
        .env_remove("FLEETBUS_MESH_DIR")
        .env_remove("FLEETBUS_NATS_CREDS")
        .env_remove("FLEETBUS_NATS_CA")
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

/// The default mesh is secure: TLS and operator mode, the files an operator
/// needs in the mesh directory, the tour's commands unchanged, a client
/// without credentials refused, and `fleetbus join` output brings a new
/// cluster's agent in with nothing else copied by hand.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn secure_mesh_runs_the_tour_and_takes_a_joined_cluster() {
    use fleetbus_testsupport::{AgentCommand, DevClusterOpts, Member};

    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join(".fleetbus-mesh");
    let _guard = DownOnDrop(dir.clone());
    let up = fleetbus(&dir, &["mesh", "up", "--clusters", "2", "--detach"])
        .output()
        .unwrap();
    assert!(up.status.success(), "{}{}", text(&up), logs(&dir));
    let state = MeshState::read(&dir).unwrap();
    let url = state.nats.as_ref().unwrap().url.clone();
    assert!(url.starts_with("tls://"), "{url}");
    for f in ["ca.pem", "admin.creds", "a/nats.creds", "b/nats.creds"] {
        assert!(dir.join(f).is_file(), "{f}");
    }
    let stdout = String::from_utf8_lossy(&up.stdout);
    assert!(
        stdout.contains("--creds") && stdout.contains("ca.pem"),
        "{stdout}"
    );

    // The tour's commands, as the README writes them.
    let ls = tour_command(tmp.path(), &url, &["clusters", "ls"]);
    assert!(ls.status.success(), "{}", text(&ls));
    // The mesh directory holds the fleet root: every agent's record is
    // verified against it, and both pass (none is left out).
    assert!(dir.join("root.pub").is_file());
    let listed = String::from_utf8_lossy(&ls.stdout);
    for name in ["a ", "b "] {
        assert!(listed.lines().any(|l| l.starts_with(name)), "{}", text(&ls));
    }
    assert!(!text(&ls).contains("left out"), "{}", text(&ls));
    let status = tour_command(tmp.path(), &url, &["status"]);
    assert_eq!(status.status.code(), Some(0), "{}", text(&status));
    // Run from elsewhere, the command cannot find them, and says where it looked.
    let elsewhere = tour_command(&dir.join("a"), &url, &["clusters", "ls"]);
    assert_eq!(elsewhere.status.code(), Some(1), "{}", text(&elsewhere));
    let err = String::from_utf8_lossy(&elsewhere.stderr);
    assert!(
        err.contains("no --creds or --ca given, and .fleetbus-mesh holds no secure mesh"),
        "{err}"
    );

    // A client with no credentials, or not trusting the CA, is refused.
    let err = async_nats::connect(url.as_str()).await.unwrap_err();
    assert!(err.to_string().contains("certificate"), "{err}");
    let plain = url.replace("tls://", "nats://");
    let err = async_nats::ConnectOptions::new()
        .add_root_certificates(dir.join("ca.pem"))
        .connect(plain.as_str())
        .await
        .unwrap_err();
    assert!(err.to_string().contains("authorization"), "{err}");

    // A new cluster joins with `join`'s output and the CA, nothing else.
    let join = fleetbus(&dir, &["join", "c4", "-o", "creds"])
        .output()
        .unwrap();
    assert!(join.status.success(), "{}", text(&join));
    let creds = tmp.path().join("c4.creds");
    std::fs::write(&creds, &join.stdout).unwrap();
    // Its keys, certificate and the fleet root, from the Secret of `-o
    // manifest` (what the chart mounts): the mesh's agents trust only
    // clusters whose records are signed by a certified key.
    let manifest = fleetbus(&dir, &["join", "c4", "-o", "manifest"])
        .output()
        .unwrap();
    assert!(manifest.status.success(), "{}", text(&manifest));
    let manifest = String::from_utf8_lossy(&manifest.stdout).into_owned();
    let trust: serde_json::Value = manifest
        .split("\n---\n")
        .filter_map(|d| fleetbus_schemas::yaml::from_str::<serde_json::Value>(d).ok())
        .find(|d| d["metadata"]["name"].as_str() == Some("fleetbus-cluster-trust"))
        .expect("the trust Secret");
    let mounted = |key: &str| {
        let path = tmp.path().join(format!("c4-{key}"));
        std::fs::write(&path, trust["stringData"][key].as_str().unwrap()).unwrap();
        path
    };
    let cmd = AgentCommand::new("c4")
        .nats_url(&url)
        .nats_creds(&creds)
        .nats_tls_ca(dir.join("ca.pem"))
        .fleet_root(mounted("fleet-root.pub"))
        .cluster_key(mounted("cluster.key"))
        .cluster_cert(mounted("cluster.cert"));
    let c4 = Member::launch(DevClusterOpts::new("c4"), cmd)
        .await
        .unwrap();
    let kubeconfig = state.clusters[0].kubeconfig.clone();
    wait_for_blocking("a to see c4 as a peer", Duration::from_secs(60), || {
        let out = Command::new("/usr/lib/google-cloud-sdk/bin/kubectl.1.33")
            .arg("--kubeconfig")
            .arg(&kubeconfig)
            .args([
                "get",
                "clusters.fleetbus.io",
                "c4",
                "-o",
                "jsonpath={.status.state}",
            ])
            .output()
            .unwrap();
        match String::from_utf8_lossy(&out.stdout).as_ref() {
            "Ready" => Ok(()),
            _ => Err(format!("{}\nc4 agent: {}", text(&out), c4.agent.log())),
        }
    });
    let ls = tour_command(tmp.path(), &url, &["clusters", "ls"]);
    assert!(
        String::from_utf8_lossy(&ls.stdout).contains("c4"),
        "{}",
        text(&ls)
    );

    // `leave` takes effect on the running mesh: its nats-server reloads,
    // closes c4's connection and refuses c4's creds from then on.
    let connect_c4 = || async {
        async_nats::ConnectOptions::with_credentials_file(&creds)
            .await
            .unwrap()
            .add_root_certificates(dir.join("ca.pem"))
            .connect(url.as_str())
            .await
    };
    connect_c4().await.expect("c4's creds work before leave");
    let leave = fleetbus(&dir, &["leave", "c4"]).output().unwrap();
    assert!(leave.status.success(), "{}", text(&leave));
    assert!(
        text(&leave).contains("reloaded the mesh's nats-server"),
        "{}",
        text(&leave)
    );
    fleetbus_testsupport::wait_for("c4's creds refused", Duration::from_secs(30), || async {
        match connect_c4().await {
            Err(e) if e.to_string().contains("authorization") => Ok(()),
            other => Err(format!("{:?}", other.map(|_| "connected"))),
        }
    })
    .await;
    // The agent's live connection was closed, and it stays out.
    wait_for_blocking("c4's agent disconnected", Duration::from_secs(30), || {
        let log = c4.agent.log();
        if log.contains("NATS connection lost") {
            Ok(())
        } else {
            Err(log)
        }
    });
}
