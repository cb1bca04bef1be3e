//! The owned child against real processes: the death signal (as root and as another
//! user), the stop, the KILL after the grace, the restart, the failure message.

use super::*;
use std::io::{BufRead, BufReader};

/// Whether PID `pid` is gone or a zombie (dead, not yet reaped by whoever adopted it).
fn dead(pid: u32) -> bool {
    match fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(stat) => stat
            .rsplit_once(") ")
            .is_some_and(|(_, rest)| rest.starts_with('Z') || rest.starts_with('X')),
    }
}

const HELPER: &str = "BE_TESTBED_DEATH_HELPER";

/// Not a test by itself: the process the test below starts. It spawns `sleep` from a
/// thread that then ends (as a test thread does), waits for a second child to exit
/// (so a death signal of that thread's end would have landed), prints the sleep's
/// PID and waits to be killed.
#[test]
fn death_helper() {
    let Some(user) = std::env::var_os(HELPER) else {
        return;
    };
    let user = user.into_string().unwrap();
    let sleeper = std::thread::spawn(move || {
        Spawn::new("sleep", "sleep")
            .arg("1000")
            .run_as((!user.is_empty()).then_some(user.as_str()))
            .spawn()
            .unwrap()
    })
    .join()
    .unwrap();
    // setpriv sets the death signal before it runs sleep: once sleep runs, it is set
    // (a parent killed before that, setpriv still changing user, would not signal).
    assert!(wait_until(Duration::from_secs(10), || {
        fs::read(format!("/proc/{}/cmdline", sleeper.id())).is_ok_and(|c| c.starts_with(b"sleep"))
    }));
    let mut done = Spawn::new("true", "true").spawn().unwrap();
    assert!(
        done.wait_timeout(Duration::from_secs(10))
            .unwrap()
            .is_some()
    );
    assert!(
        !dead(sleeper.id()),
        "sleep died with the thread that spawned it"
    );
    // libtest prints "test NAME ... " before it on the same line.
    println!("\nsleep-pid={}", sleeper.id());
    std::mem::forget(sleeper);
    let mut line = String::new();
    let _ = io::stdin().read_line(&mut line);
}

fn child_dies_with_its_parent(user: &str) {
    let mut helper = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "process::tests::death_helper",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(HELPER, user)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let mut out = BufReader::new(helper.stdout.take().unwrap());
    let mut line = String::new();
    let pid = loop {
        line.clear();
        assert_ne!(out.read_line(&mut line).unwrap(), 0, "the helper ended");
        if let Some((_, pid)) = line.trim().split_once("sleep-pid=") {
            break pid.parse::<u32>().unwrap();
        }
    };
    assert!(
        !dead(pid),
        "sleep {pid} is not running before its parent dies"
    );
    helper.kill().unwrap();
    helper.wait().unwrap();
    assert!(
        wait_until(Duration::from_secs(10), || dead(pid)),
        "sleep {pid} outlived the process that spawned it"
    );
}

#[test]
fn a_child_dies_with_the_process_that_spawned_it() {
    child_dies_with_its_parent("");
}

#[test]
fn a_child_run_as_another_user_dies_with_the_process_that_spawned_it() {
    if !is_root() {
        return;
    }
    child_dies_with_its_parent("nobody");
}

#[test]
fn a_drop_stops_the_child_and_restart_starts_it_again() {
    let mut sleep = Spawn::new("sleep", "sleep").arg("1000").spawn().unwrap();
    let first = sleep.id();
    sleep.restart().unwrap();
    assert_ne!(sleep.id(), first);
    assert!(sleep.try_wait().unwrap().is_none());
    let second = sleep.id();
    drop(sleep);
    assert!(dead(second));
}

#[test]
fn a_child_that_ignores_its_stop_signal_is_killed_after_its_grace() {
    let mut stubborn = Spawn::new("stubborn shell", "sh")
        .args(["-c", "trap '' TERM; echo ready; exec sleep 1000"])
        .grace(Duration::from_millis(200))
        .spawn()
        .unwrap();
    // `sleep` inherits the ignored TERM.
    assert!(wait_until(Duration::from_secs(10), || {
        fs::read_to_string(format!("/proc/{}/cmdline", stubborn.id()))
            .is_ok_and(|c| c.starts_with("sleep"))
    }));
    let status = stubborn.stop().unwrap();
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(status.signal(), Some(9));
}

#[test]
fn a_failure_names_the_command_and_the_log_tail() {
    let dir = TempDir::new("unit").unwrap();
    let log = dir.path().join("log");
    let mut child = Spawn::new("a shell", "sh")
        .args(["-c", "echo one; echo two >&2; exit 3"])
        .log(&log)
        .spawn()
        .unwrap();
    let status = child
        .wait_timeout(Duration::from_secs(10))
        .unwrap()
        .unwrap();
    assert_eq!(status.code(), Some(3));
    assert_eq!(
        child.failure("exited"),
        format!(
            "a shell exited\n  command: sh -c echo one; echo two >&2; exit 3\n  \
             last lines of {}:\n    one\n    two\n",
            log.display()
        )
    );
    let path = dir.path().to_owned();
    drop(dir);
    assert!(!path.exists());
}
