"""A SPARK_HOME for the spark-operator: the real spark-submit, from Maven Central.

The spark-operator submits every SparkApplication by running ``$SPARK_HOME/bin/spark-submit``
(cluster mode: Spark's Kubernetes client creates the driver pod through the API server). Spark's
distribution tarball is not on any package registry, but its jars are on Maven Central, so
``spark-submit/pom.xml`` lists Spark's submission modules and ``mvn dependency:copy-dependencies``
materialises them; ``bin/spark-submit`` then runs ``org.apache.spark.deploy.SparkSubmit`` on that
classpath, which is what the distribution's script ends up executing. Needs Java 17 and Maven.

Cached like the Go binaries, keyed by the pom's content:
``${XDG_CACHE_HOME:-~/.cache}/kube-queue/spark-submit-<sha>/`` (about 190 MB, 150 jars).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

from e2e.cluster.build import BuildError, Log, bin_root, say

POM = Path(__file__).resolve().parent / "spark-submit" / "pom.xml"
STAMP = ".built.json"
SPARK_SUBMIT = """#!/bin/sh
# spark-submit of a Spark distribution, reduced to what it runs: SparkSubmit on Spark's jars.
exec java -Xmx512m -cp "$SPARK_HOME/jars/*" org.apache.spark.deploy.SparkSubmit "$@"
"""


def missing_tools() -> list[str]:
    return [tool for tool in ("java", "mvn") if shutil.which(tool) is None]


def _directory() -> Path:
    digest = hashlib.sha256(POM.read_bytes() + SPARK_SUBMIT.encode()).hexdigest()[:12]
    return bin_root().parent / f"spark-submit-{digest}"


@contextlib.contextmanager
def _lock() -> Iterator[None]:
    bin_root().parent.mkdir(parents=True, exist_ok=True)
    with open(bin_root().parent / ".spark-submit.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def spark_home(log: Log = say) -> Path:
    """The cached SPARK_HOME, made on first use (Maven downloads the jars once per machine)."""
    final = _directory()
    if (final / STAMP).is_file():
        return final
    missing = missing_tools()
    if missing:
        raise BuildError(f"the Spark submission client needs {' and '.join(missing)} "
                         "(Java 17 and Maven, e.g. apt-get install openjdk-17-jdk-headless maven)")
    with _lock():
        if (final / STAMP).is_file():
            return final
        scratch = final.with_name(f".{final.name}.partial-{os.getpid()}")
        shutil.rmtree(scratch, ignore_errors=True)
        (scratch / "bin").mkdir(parents=True)
        log(f"[build] spark-submit client (Spark jars from Maven Central) -> {final}")
        started = time.monotonic()
        proc = subprocess.run(
            ["mvn", "-q", "-B", "-f", str(POM), "dependency:copy-dependencies",
             f"-DoutputDirectory={scratch / 'jars'}"],
            capture_output=True, text=True,
        )
        if proc.returncode != 0:
            shutil.rmtree(scratch, ignore_errors=True)
            raise BuildError(f"mvn dependency:copy-dependencies -f {POM} failed:\n"
                             f"{(proc.stdout + proc.stderr)[-3000:]}")
        script = scratch / "bin" / "spark-submit"
        script.write_text(SPARK_SUBMIT)
        script.chmod(0o755)
        elapsed = time.monotonic() - started
        jars = len(list((scratch / "jars").glob("*.jar")))
        (scratch / STAMP).write_text(json.dumps(
            {"pom": str(POM), "jars": jars, "seconds": round(elapsed, 1)}, indent=2) + "\n")
        shutil.rmtree(final, ignore_errors=True)
        scratch.rename(final)
        log(f"[build] spark-submit client: {jars} jars in {elapsed:.0f}s")
    return final
