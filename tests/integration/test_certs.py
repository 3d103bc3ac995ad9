"""Certificates for TLS tests, made at run time with the `openssl` command line: a CA and
leaf certificates it signs (EC P-256, valid two days, SAN 127.0.0.1 and localhost). Nothing
is checked in; every test gets its own directory. Not a test module (no TestCase)."""
import os
import subprocess


def _run(*args, cwd):
    subprocess.run(["openssl"] + list(args), cwd=cwd, check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


class CA:
    def __init__(self, directory, name):
        self.dir = directory
        self.name = name
        self.key = os.path.join(directory, name + "-ca.key")
        self.cert = os.path.join(directory, name + "-ca.crt")
        _run("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
             "-keyout", self.key, "-out", self.cert, "-days", "2", "-subj", "/CN=%s test CA" % name,
             cwd=directory)
        os.chmod(self.key, 0o600)

    def issue(self, cn):
        """(cert, key) for `cn`, signed by this CA."""
        base = os.path.join(self.dir, "%s-%s" % (self.name, cn))
        key, csr, cert, ext = base + ".key", base + ".csr", base + ".crt", base + ".ext"
        with open(ext, "w") as f:
            f.write("subjectAltName=IP:127.0.0.1,DNS:localhost\n"
                    "extendedKeyUsage=serverAuth,clientAuth\n")
        _run("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
             "-keyout", key, "-out", csr, "-subj", "/CN=%s" % cn, cwd=self.dir)
        _run("x509", "-req", "-in", csr, "-CA", self.cert, "-CAkey", self.key, "-CAcreateserial",
             "-out", cert, "-days", "2", "-extfile", ext, cwd=self.dir)
        os.chmod(key, 0o600)
        return cert, key
