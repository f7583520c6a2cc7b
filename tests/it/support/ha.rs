//! The high-availability harness: a pg_auto_failover monitor and two PostgreSQL nodes, and a
//! three-server NATS JetStream cluster, all on loopback, with the fast-failure settings of
//! `shared/HA.md`.
//!
//! Every process runs in a process group of its own (`pg_autoctl run` with its postmaster,
//! each nats-server), so a test kills a node as a crash would (SIGKILL of the group). The
//! postmaster's children make groups of their own; they are found by their working directory
//! (the data directory, inside the test's folder) and killed too. Teardown: on drop, at
//! process exit (an `atexit` handler), and, for a test run that was killed, by the next run
//! (folders `/tmp/ledger-ha-<pid>-*` whose pid is gone).
#![allow(dead_code)]

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Mutex, Once};
use std::time::{Duration, Instant};

/// Prefix of the harness's folders, followed by `<pid>-<n>`.
const PREFIX: &str = "ledger-ha-";
/// Longest a cluster may take to form (limit HA_READY_TIMEOUT).
pub const HA_READY_TIMEOUT: Duration = Duration::from_secs(60);
/// PostgreSQL's programs.
const PG_BIN: &str = "/usr/lib/postgresql/15/bin";

/// Folders of this process, torn down at exit if still there.
static DIRS: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());

fn setup_once() {
    static SETUP: Once = Once::new();
    SETUP.call_once(|| {
        remove_stale();
        // SAFETY: registers a plain `extern "C" fn` that never unwinds.
        unsafe { libc::atexit(teardown_at_exit) };
    });
}

extern "C" fn teardown_at_exit() {
    let _ = std::panic::catch_unwind(|| {
        let dirs = DIRS.lock().map(|d| d.clone()).unwrap_or_default();
        for d in dirs {
            kill_everything_in(&d);
            let _ = std::fs::remove_dir_all(&d);
        }
    });
}

/// Folders of killed test runs: their processes killed, the folders removed.
fn remove_stale() {
    let Ok(entries) = std::fs::read_dir(std::env::temp_dir()) else {
        return;
    };
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let Some(pid) = name
            .strip_prefix(PREFIX)
            .and_then(|r| r.split('-').next())
            .and_then(|p| p.parse::<i32>().ok())
        else {
            continue;
        };
        if pid as u32 == std::process::id() || unsafe { libc::kill(pid, 0) } == 0 {
            continue;
        }
        kill_everything_in(&e.path());
        let _ = std::fs::remove_dir_all(e.path());
        eprintln!("removed the leftover HA harness {}", e.path().display());
    }
}

/// A new folder for one cluster, owned by `postgres` (its programs write there).
fn new_dir(what: &str) -> PathBuf {
    setup_once();
    static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let dir = std::env::temp_dir().join(format!("{PREFIX}{}-{n}-{what}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    DIRS.lock().unwrap().push(dir.clone());
    dir
}

/// SIGKILL of every process whose working directory is inside `dir`, until none is left.
pub fn kill_everything_in(dir: &Path) {
    let dir = std::fs::canonicalize(dir).unwrap_or_else(|_| dir.to_path_buf());
    for _ in 0..50 {
        let pids = pids_in(&dir);
        if pids.is_empty() {
            return;
        }
        for p in pids {
            unsafe { libc::kill(p, libc::SIGKILL) };
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Live (not zombie) processes whose working directory is `dir` or inside it.
fn pids_in(dir: &Path) -> Vec<i32> {
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let inside =
            std::fs::read_link(format!("/proc/{pid}/cwd")).is_ok_and(|c| c.starts_with(dir));
        let zombie = std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .map(|s| {
                s.rsplit_once(')')
                    .is_some_and(|(_, r)| r.trim_start().starts_with('Z'))
            })
            .unwrap_or(true);
        if inside && !zombie {
            out.push(pid);
        }
    }
    out
}

/// The `postgres` system user's uid and gid.
fn postgres_user() -> (u32, u32) {
    let name = std::ffi::CString::new("postgres").unwrap();
    let pw = unsafe { libc::getpwnam(name.as_ptr()) };
    assert!(
        !pw.is_null(),
        "no postgres user (apt-get install postgresql)"
    );
    unsafe { ((*pw).pw_uid, (*pw).pw_gid) }
}

fn chown_postgres(p: &Path) {
    let (uid, gid) = postgres_user();
    std::os::unix::fs::chown(p, Some(uid), Some(gid)).unwrap();
}

/// A pg_auto_failover formation: a monitor and two nodes, `node1` the first primary.
pub struct PgHa {
    dir: PathBuf,
    pub monitor_port: u16,
    pub ports: [u16; 2],
    /// `pg_autoctl run` of the monitor, node1, node2 (each a process-group leader).
    runs: Mutex<[Option<std::process::Child>; 3]>,
}

impl PgHa {
    /// Starts the monitor and both nodes, and waits until node1 is primary and node2 its
    /// synchronous standby.
    pub async fn start() -> PgHa {
        let began = Instant::now();
        let dir = new_dir("pg");
        for sub in ["xdg/config", "xdg/data", "xdg/run", "sock"] {
            std::fs::create_dir_all(dir.join(sub)).unwrap();
        }
        std::fs::set_permissions(dir.join("xdg/run"), std::fs::Permissions::from_mode(0o700))
            .unwrap();
        for sub in ["", "xdg", "xdg/config", "xdg/data", "xdg/run", "sock"] {
            chown_postgres(&dir.join(sub));
        }
        let ha = PgHa {
            dir,
            monitor_port: super::free_port(),
            ports: [super::free_port(), super::free_port()],
            runs: Mutex::new([None, None, None]),
        };
        ha.create_monitor().await;
        ha.create_node(0).await;
        ha.wait_for(&["node1=single/single"], HA_READY_TIMEOUT)
            .await;
        ha.create_node(1).await;
        ha.wait_for(
            &["node1=primary/primary node2=secondary/secondary"],
            HA_READY_TIMEOUT,
        )
        .await;
        eprintln!("pg_auto_failover formation ready in {:?}", began.elapsed());
        ha
    }

    /// The environment of every command: PostgreSQL's programs first, pg_autoctl's state in
    /// the harness's folder.
    fn envs(&self) -> Vec<(&'static str, std::ffi::OsString)> {
        let d = |sub: &str| self.dir.join(sub).into_os_string();
        vec![
            (
                "PATH",
                format!("{PG_BIN}:/usr/bin:/bin:/usr/sbin:/sbin").into(),
            ),
            ("HOME", self.dir.clone().into_os_string()),
            ("XDG_CONFIG_HOME", d("xdg/config")),
            ("XDG_DATA_HOME", d("xdg/data")),
            ("XDG_RUNTIME_DIR", d("xdg/run")),
            // pg_autoctl connects to its local PostgreSQL by socket without passing the folder.
            ("PGHOST", d("sock")),
        ]
    }

    /// A command of PostgreSQL or pg_autoctl, as `postgres`, in the harness's environment.
    fn command(&self, program: &str) -> tokio::process::Command {
        let (uid, gid) = postgres_user();
        let mut c = tokio::process::Command::new(program);
        c.uid(uid)
            .gid(gid)
            .current_dir(&self.dir)
            .env_clear()
            .envs(self.envs())
            .stdin(Stdio::null());
        c
    }

    /// Runs a command to its end, its output in `log` (appended); panics if it fails.
    async fn run(&self, program: &str, args: &[&str], log: &str) {
        let out = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.join(log))
            .unwrap();
        let status = self
            .command(program)
            .args(args)
            .stdout(out.try_clone().unwrap())
            .stderr(out)
            .status()
            .await
            .unwrap();
        assert!(
            status.success(),
            "{program} {args:?} failed ({status}); log:\n{}",
            std::fs::read_to_string(self.dir.join(log)).unwrap_or_default()
        );
    }

    /// `initdb` of a data folder, with the socket folder and a small shared_buffers.
    async fn initdb(&self, name: &str) {
        self.run(
            "initdb",
            &["-D", name, "--auth=trust", "-U", "postgres"],
            "initdb.log",
        )
        .await;
        let conf = format!(
            "\nunix_socket_directories='{}'\nshared_buffers='128MB'\n",
            self.dir.join("sock").display()
        );
        let path = self.dir.join(name).join("postgresql.conf");
        let mut text = std::fs::read_to_string(&path).unwrap();
        text.push_str(&conf);
        std::fs::write(path, text).unwrap();
    }

    async fn create_monitor(&self) {
        self.initdb("monitor").await;
        let port = self.monitor_port.to_string();
        self.run(
            "pg_autoctl",
            &[
                "create",
                "monitor",
                "--pgdata",
                "monitor",
                "--pgport",
                &port,
                "--hostname",
                "127.0.0.1",
                "--listen",
                "127.0.0.1",
                "--auth",
                "trust",
                "--ssl-self-signed",
            ],
            "monitor.create.log",
        )
        .await;
        self.start_run(2);
        let monitor = self.wait_monitor().await;
        for (k, v) in [
            ("health_check_period", 1000),
            ("health_check_timeout", 1000),
            ("health_check_max_retries", 1),
            ("health_check_retry_delay", 500),
            ("node_considered_unhealthy_timeout", 3000),
            ("primary_demote_timeout", 6000),
        ] {
            monitor
                .batch_execute(&format!("ALTER SYSTEM SET pgautofailover.{k} = {v}"))
                .await
                .unwrap();
        }
        monitor
            .batch_execute("SELECT pg_reload_conf()")
            .await
            .unwrap();
    }

    /// Creates node `i` (node1 from its own initdb; node2 cloned from the primary by
    /// `pg_autoctl`), with a short network-partition timeout, and runs it.
    async fn create_node(&self, i: usize) {
        let name = format!("node{}", i + 1);
        if i == 0 {
            self.initdb(&name).await;
        }
        let (port, monitor) = (
            self.ports[i].to_string(),
            format!(
                "postgres://autoctl_node@127.0.0.1:{}/pg_auto_failover",
                self.monitor_port
            ),
        );
        let log = format!("{name}.create.log");
        self.run(
            "pg_autoctl",
            &[
                "create",
                "postgres",
                "--pgdata",
                &name,
                "--pgport",
                &port,
                "--hostname",
                "127.0.0.1",
                "--listen",
                "127.0.0.1",
                "--name",
                &name,
                "--dbname",
                "ledger",
                "--monitor",
                &monitor,
                "--auth",
                "trust",
                "--ssl-self-signed",
            ],
            &log,
        )
        .await;
        self.run(
            "pg_autoctl",
            &[
                "config",
                "set",
                "--pgdata",
                &name,
                "timeout.network_partition_timeout",
                "4",
            ],
            &log,
        )
        .await;
        self.start_run(i);
    }

    /// Starts `pg_autoctl run` of node `i` (2: the monitor) in a process group of its own.
    fn start_run(&self, i: usize) {
        let name = self.data_name(i);
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.join(format!("{name}.run.log")))
            .unwrap();
        let mut c = std::process::Command::new("pg_autoctl");
        let (uid, gid) = postgres_user();
        std::os::unix::process::CommandExt::uid(&mut c, uid);
        std::os::unix::process::CommandExt::gid(&mut c, gid);
        std::os::unix::process::CommandExt::process_group(&mut c, 0);
        let child = c
            .env_clear()
            .envs(self.envs())
            .current_dir(&self.dir)
            .args(["run", "--pgdata", name])
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("pg_autoctl runs (scripts/ensure-deps.sh installs it)");
        self.runs.lock().unwrap()[i] = Some(child);
    }

    fn data_name(&self, i: usize) -> &'static str {
        ["node1", "node2", "monitor"][i]
    }

    /// The monitor's database, once it answers.
    async fn wait_monitor(&self) -> tokio_postgres::Client {
        let url = format!(
            "host=127.0.0.1 port={} user=postgres dbname=pg_auto_failover sslmode=require connect_timeout=2",
            self.monitor_port
        );
        let deadline = Instant::now() + HA_READY_TIMEOUT;
        loop {
            match ledger_server::storage::connect(&url).await {
                Ok(c) => return c,
                Err(e) => assert!(
                    Instant::now() < deadline,
                    "the monitor does not answer: {e}"
                ),
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// The monitor's view: `node1=primary/primary node2=secondary/secondary` (reported and
    /// goal state of each node).
    pub async fn states(&self) -> String {
        let monitor = self.wait_monitor().await;
        monitor
            .query_one(
                "SELECT coalesce(string_agg(nodename || '=' || reportedstate || '/' || goalstate, ' ' ORDER BY nodeid), '') FROM pgautofailover.node",
                &[],
            )
            .await
            .map(|r| r.get(0))
            .unwrap_or_default()
    }

    /// Waits until the monitor's view is one of `want` (at most `timeout`); returns it.
    pub async fn wait_for(&self, want: &[&str], timeout: Duration) -> String {
        let deadline = Instant::now() + timeout;
        loop {
            let s = self.states().await;
            if want.contains(&s.as_str()) {
                return s;
            }
            assert!(
                Instant::now() < deadline,
                "the formation is at {s:?}, not {want:?}, after {timeout:?}; logs in {}",
                self.dir.display()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// The node the monitor names primary (0 or 1).
    pub async fn primary(&self) -> usize {
        let s = self.states().await;
        if s.contains("node2=primary") || s.contains("node2=wait_primary") {
            1
        } else {
            0
        }
    }

    /// The multi-host URL the service uses: both nodes, the writable one chosen, TLS required.
    pub fn url(&self) -> String {
        format!(
            "postgresql://postgres@127.0.0.1:{},127.0.0.1:{}/ledger?target_session_attrs=read-write&sslmode=require&connect_timeout=2",
            self.ports[0], self.ports[1]
        )
    }

    /// One node's URL (as a standby or a primary, whichever it is).
    pub fn node_url(&self, i: usize) -> String {
        format!(
            "postgresql://postgres@127.0.0.1:{}/ledger?sslmode=require&connect_timeout=2",
            self.ports[i]
        )
    }

    /// A node's self-signed certificate (made by `--ssl-self-signed`).
    pub fn server_cert(&self, i: usize) -> PathBuf {
        self.dir.join(self.data_name(i)).join("server.crt")
    }

    /// SIGKILL of node `i`'s whole process group (keeper and postmaster), and of the
    /// postmaster's children (groups of their own); returns once none is left.
    pub fn kill(&self, i: usize) {
        let child = self.runs.lock().unwrap()[i].take();
        if let Some(mut c) = child {
            unsafe { libc::kill(-(c.id() as i32), libc::SIGKILL) };
            let _ = c.wait();
        }
        kill_everything_in(&self.dir.join(self.data_name(i)));
    }

    /// Runs node `i` again (it rejoins as a standby, rewound by pg_autoctl if need be).
    pub fn restart(&self, i: usize) {
        assert!(
            self.runs.lock().unwrap()[i].is_none(),
            "node {i} is running"
        );
        self.start_run(i);
    }

    /// SIGSTOP / SIGCONT of every process of node `i` (a node that hangs).
    pub fn freeze(&self, i: usize, frozen: bool) {
        let dir = std::fs::canonicalize(self.dir.join(self.data_name(i))).unwrap();
        let mut pids = pids_in(&dir);
        if let Some(c) = &self.runs.lock().unwrap()[i] {
            pids.push(c.id() as i32);
        }
        let sig = if frozen { libc::SIGSTOP } else { libc::SIGCONT };
        for p in pids {
            unsafe { libc::kill(p, sig) };
        }
    }

    /// The harness's folder (logs of every command).
    pub fn dir(&self) -> &Path {
        &self.dir
    }
}

impl Drop for PgHa {
    fn drop(&mut self) {
        let mut runs = self.runs.lock().unwrap_or_else(|p| p.into_inner());
        for c in runs.iter_mut().filter_map(Option::take) {
            unsafe { libc::kill(-(c.id() as i32), libc::SIGKILL) };
        }
        for mut c in runs.iter_mut().filter_map(Option::take) {
            let _ = c.wait();
        }
        drop(runs);
        kill_everything_in(&self.dir);
        if !std::thread::panicking() {
            let _ = std::fs::remove_dir_all(&self.dir);
        } else {
            eprintln!("HA harness logs kept in {}", self.dir.display());
        }
    }
}

/// Three JetStream-enabled nats-servers in one cluster.
pub struct NatsCluster {
    dir: PathBuf,
    /// Client, monitoring and cluster port of each server.
    ports: [(u16, u16, u16); 3],
    servers: Mutex<[Option<std::process::Child>; 3]>,
}

impl NatsCluster {
    /// Starts three servers and waits until each says JetStream is healthy.
    pub async fn start() -> NatsCluster {
        let dir = new_dir("nats");
        let p = super::free_port;
        let c = NatsCluster {
            dir,
            ports: [(p(), p(), p()), (p(), p(), p()), (p(), p(), p())],
            servers: Mutex::new([None, None, None]),
        };
        for i in 0..3 {
            c.write_config(i);
            c.start_server(i);
        }
        for i in 0..3 {
            c.wait_healthy(i).await;
        }
        c
    }

    fn write_config(&self, i: usize) {
        let (client, monitor, cluster) = self.ports[i];
        let routes: Vec<String> = (0..3)
            .filter(|&j| j != i)
            .map(|j| format!("nats-route://127.0.0.1:{}", self.ports[j].2))
            .collect();
        let store = self.dir.join(format!("n{i}"));
        let conf = format!(
            "server_name: n{i}\nlisten: 127.0.0.1:{client}\nhttp: 127.0.0.1:{monitor}\n\
             jetstream {{ store_dir: \"{}\", max_memory_store: 256MB, max_file_store: 1GB }}\n\
             cluster {{ name: ledger, listen: 127.0.0.1:{cluster}, routes: [{}] }}\n",
            store.display(),
            routes.join(", ")
        );
        std::fs::write(self.dir.join(format!("n{i}.conf")), conf).unwrap();
    }

    fn start_server(&self, i: usize) {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.join(format!("n{i}.log")))
            .unwrap();
        let mut cmd = std::process::Command::new(super::nats::nats_server_bin());
        std::os::unix::process::CommandExt::process_group(&mut cmd, 0);
        let child = cmd
            .arg("-c")
            .arg(self.dir.join(format!("n{i}.conf")))
            .current_dir(&self.dir)
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("nats-server starts");
        self.servers.lock().unwrap()[i] = Some(child);
    }

    /// Waits until server `i`'s `/healthz?js-enabled-only=true` answers ok.
    pub async fn wait_healthy(&self, i: usize) {
        let deadline = Instant::now() + HA_READY_TIMEOUT;
        loop {
            let body = http_get(self.ports[i].1, "/healthz?js-enabled-only=true").await;
            if body.as_deref().is_some_and(|b| b.contains("\"ok\"")) {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "nats-server n{i} not healthy: {body:?} (exited: {}); its log ends:\n{}",
                self.exited(i),
                self.log_tail(i)
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// The client URLs, comma-separated (as `--nats-url` takes them).
    pub fn urls(&self) -> String {
        self.ports
            .iter()
            .map(|p| format!("nats://127.0.0.1:{}", p.0))
            .collect::<Vec<_>>()
            .join(",")
    }

    pub fn url(&self, i: usize) -> String {
        format!("nats://127.0.0.1:{}", self.ports[i].0)
    }

    /// SIGKILL of server `i`.
    pub fn kill(&self, i: usize) {
        if let Some(mut c) = self.servers.lock().unwrap()[i].take() {
            unsafe { libc::kill(-(c.id() as i32), libc::SIGKILL) };
            let _ = c.wait();
        }
    }

    /// Starts server `i` again on its store.
    pub async fn restart(&self, i: usize) {
        self.start_server(i);
        // A server that exited at once (seen once in CI under load: it never answered its
        // health check) is started again, once.
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            if self.exited(i) {
                eprintln!(
                    "nats-server n{i} exited at its restart; starting it again:\n{}",
                    self.log_tail(i)
                );
                self.start_server(i);
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        self.wait_healthy(i).await;
    }

    /// Whether server `i`'s process has exited.
    fn exited(&self, i: usize) -> bool {
        let mut servers = self.servers.lock().unwrap();
        servers[i]
            .as_mut()
            .is_some_and(|c| c.try_wait().ok().flatten().is_some())
    }

    /// The last lines of server `i`'s log.
    fn log_tail(&self, i: usize) -> String {
        let log = std::fs::read_to_string(self.dir.join(format!("n{i}.log"))).unwrap_or_default();
        let lines: Vec<&str> = log.lines().collect();
        lines[lines.len().saturating_sub(20)..].join("\n")
    }

    /// The server (0..3) leading stream `stream`, as the cluster reports it.
    pub async fn stream_leader(&self, stream: &str) -> Option<usize> {
        for i in 0..3 {
            let Ok(client) = async_nats::connect(self.url(i)).await else {
                continue;
            };
            let js = async_nats::jetstream::new(client);
            if let Ok(mut s) = js.get_stream(stream).await {
                if let Ok(info) = s.info().await {
                    let leader = info.cluster.as_ref().and_then(|c| c.leader.clone())?;
                    return leader.strip_prefix('n').and_then(|n| n.parse().ok());
                }
            }
        }
        None
    }

    /// Server `i`'s own copy of stream `stream`: (messages, first sequence, last sequence,
    /// bytes), from its monitoring endpoint.
    pub async fn stream_state(&self, i: usize, stream: &str) -> Option<(u64, u64, u64, u64)> {
        let body = http_get(self.ports[i].1, "/jsz?accounts=true&streams=true").await?;
        let v: serde_json::Value = serde_json::from_str(&body).ok()?;
        let streams = v["account_details"]
            .as_array()?
            .iter()
            .flat_map(|a| a["stream_detail"].as_array().cloned().unwrap_or_default());
        for s in streams {
            if s["name"] == stream {
                let st = &s["state"];
                let n = |k: &str| st[k].as_u64().unwrap_or(0);
                return Some((n("messages"), n("first_seq"), n("last_seq"), n("bytes")));
            }
        }
        None
    }
}

impl Drop for NatsCluster {
    fn drop(&mut self) {
        for i in 0..3 {
            self.kill(i);
        }
        kill_everything_in(&self.dir);
        if !std::thread::panicking() {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

/// The body of `GET path` on a loopback port (HTTP/1.0), if it answers within a second.
async fn http_get(port: u16, path: &str) -> Option<String> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let fetch = async {
        let mut s = tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .ok()?;
        s.write_all(format!("GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n").as_bytes())
            .await
            .ok()?;
        let mut buf = Vec::new();
        s.read_to_end(&mut buf).await.ok()?;
        let text = String::from_utf8_lossy(&buf).into_owned();
        text.split_once("\r\n\r\n").map(|(_, b)| b.to_owned())
    };
    tokio::time::timeout(Duration::from_secs(1), fetch)
        .await
        .ok()
        .flatten()
}
