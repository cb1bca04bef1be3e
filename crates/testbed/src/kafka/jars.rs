//! The Java and the jars a broker runs on, as `scripts/kafka/lib.sh` finds them: the
//! version's pom (`scripts/kafka/pom.xml`, or a `pom-*.xml` pinning another), Java 17
//! or newer, the classpath that Maven resolves once and the cache keeps (installing a
//! missing Java or Maven stays that script's, as root only), the AppCDS archive a JVM
//! maps or writes at its clean exit (a detached JVM's named in its node's state until a
//! stop settles it), and the KRaft storage format (Kafka's own
//! StorageTool). Each is one `bash` call into the script, so the scripts and the
//! crate share one cache and one lock.

use crate::error::{Error, Result};
use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// Runs `body` in `bash` with `scripts/kafka/lib.sh` sourced and `KAFKA_POM` set for
/// `version` (empty: the default), `args` as `$2`…; its stdout, or its stderr's story.
fn lib_sh(scripts: &Path, version: &str, body: &str, args: &[&OsStr]) -> Result<String> {
    let script = format!(
        "set -euo pipefail; source \"$KAFKA_LIB\"; kafka_use_version \"$1\"; shift; {body}"
    );
    let out = Command::new("bash")
        .arg("-c")
        .arg(&script)
        .arg("bash")
        .arg(version)
        .args(args)
        .env("KAFKA_LIB", scripts.join("kafka/lib.sh"))
        .stdin(Stdio::null())
        .output()
        .map_err(|e| Error::Tool(format!("bash (for scripts/kafka/lib.sh): {e}")))?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(Error::Tool(format!(
            "scripts/kafka/lib.sh failed ({}):\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim_end()
        )))
    }
}

/// The Java and the jars of one Kafka version.
#[derive(Debug, Clone)]
pub struct Jars {
    scripts: PathBuf,
    /// What `KAFKA_VERSION` asked for (empty: the default pom's).
    asked: String,
    /// The version the pom pins.
    pub version: String,
    pub java: PathBuf,
    /// The runtime classpath, `:`-separated.
    pub classpath: String,
}

/// What one JVM does with an AppCDS archive: the flags, and the archive it writes at a
/// clean exit (`pending`: the file it writes, the name it is published under).
#[derive(Debug, Clone, Default)]
pub struct Cds {
    pub flags: Vec<String>,
    pub pending: Option<(PathBuf, PathBuf)>,
}

impl Cds {
    /// Publishes the archive the JVM wrote as it exited, if it exited cleanly; else
    /// drops it (a KILL can leave half a file).
    pub fn publish(&self, scripts: &Path, clean: bool) {
        if let Some((tmp, last)) = &self.pending {
            let clean = if clean { "1" } else { "0" };
            let args = [tmp.as_os_str(), last.as_os_str(), OsStr::new(clean)];
            if let Err(e) = lib_sh(scripts, "", "cds_publish \"$1\" \"$2\" \"$3\"", &args) {
                eprintln!("{e}");
            }
        }
    }

    /// Settles the archive a detached JVM was to write (`pending`, as its STATE_DIR's
    /// state names it: the file it writes, the name it is published under): published
    /// if `clean`, else dropped.
    pub fn settle_pending(pending: Option<(PathBuf, PathBuf)>, scripts: &Path, clean: bool) {
        let cds = Cds {
            flags: Vec::new(),
            pending,
        };
        cds.publish(scripts, clean);
    }
}

impl Jars {
    /// Resolves `version` (empty: the default); a version no pom pins is refused with
    /// the list of those there are.
    pub fn resolve(scripts: &Path, version: &str) -> Result<Jars> {
        let out = lib_sh(
            scripts,
            version,
            "kafka_pom_version \"$KAFKA_POM\"; kafka_java; kafka_classpath",
            &[],
        )?;
        let mut lines = out.lines();
        let mut next = |what: &str| {
            lines
                .next()
                .filter(|l| !l.is_empty())
                .map(str::to_owned)
                .ok_or_else(|| Error::Tool(format!("scripts/kafka/lib.sh printed no {what}")))
        };
        Ok(Jars {
            scripts: scripts.to_owned(),
            asked: version.to_owned(),
            version: next("version")?,
            java: next("java")?.into(),
            classpath: next("classpath")?,
        })
    }

    /// The AppCDS flags of one broker JVM (none with `KAFKA_CDS=0`, or for a version
    /// other than the default's).
    pub fn cds(&self) -> Result<Cds> {
        let out = lib_sh(
            &self.scripts,
            &self.asked,
            "cds_setup broker \"$1\" \"$2\"; printf '%s\\n' \"$CDS_TMP\" \"$CDS_FINAL\" \"${CDS_FLAGS[@]}\"",
            &[self.java.as_os_str(), OsStr::new(&self.classpath)],
        )?;
        let mut lines = out.lines();
        let tmp = lines.next().unwrap_or_default();
        let last = lines.next().unwrap_or_default();
        Ok(Cds {
            pending: (!tmp.is_empty()).then(|| (tmp.into(), last.into())),
            flags: lines.filter(|l| !l.is_empty()).map(str::to_owned).collect(),
        })
    }

    /// Publishes the archive a JVM wrote as it exited, if it exited cleanly; else drops
    /// it (a KILL can leave half a file).
    pub fn publish(&self, cds: &Cds, clean: bool) {
        cds.publish(&self.scripts, clean);
    }

    /// The scripts' directory these were resolved with.
    pub fn scripts(&self) -> &Path {
        &self.scripts
    }

    /// Formats the KRaft storage of the node whose configuration is `properties`:
    /// `standalone` for a single node (its own quorum), the cluster's id, the SCRAM
    /// users' arguments.
    pub fn format(
        &self,
        properties: &Path,
        cluster_id: &str,
        standalone: bool,
        scram: &[String],
    ) -> Result<()> {
        let mut args: Vec<&OsStr> = vec![OsStr::new("format")];
        if standalone {
            args.push(OsStr::new("--standalone"));
        }
        args.extend([
            OsStr::new("--cluster-id"),
            OsStr::new(cluster_id),
            OsStr::new("--config"),
            properties.as_os_str(),
        ]);
        args.extend(scram.iter().map(OsStr::new));
        lib_sh(
            &self.scripts,
            &self.asked,
            "kafka_run_class kafka.tools.StorageTool \"$@\"",
            &args,
        )
        .map(drop)
        .map_err(|e| {
            Error::Tool(format!(
                "formatting the storage of {}: {e}",
                properties.display()
            ))
        })
    }
}
