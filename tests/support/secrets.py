"""Real-format secrets with fake values, each in the kind of log line that carries it.

Test inputs constructed here (not log evidence). Each value follows its format's published shape
(detect-secrets 1.5 plugins and gitleaks rules: prefix, alphabet, length) so a masker that knows
the format must catch it; none is a live credential. `secrets` are what must never be seen in
a report or a bundle: for a prefixed token the part after the prefix (the prefix names the kind of
token and stays readable).
"""

from __future__ import annotations

import base64
import hashlib
from dataclasses import dataclass


@dataclass(frozen=True)
class Planted:
    id: str
    lines: tuple[str, ...]  # consecutive log lines (at most 6: a rule shows 6 evidence lines)
    secrets: tuple[str, ...]
    kept: str = ""  # a part of the line that must stay readable after masking


def _b64(seed: str, length: int) -> str:
    """Deterministic base64 of the given length (a fake key body or secret)."""
    raw = b""
    block = seed.encode()
    while len(raw) * 4 // 3 < length + 4:
        block = hashlib.sha256(block).digest()
        raw += block
    return base64.b64encode(raw).decode()[:length]


_PEM = (*(_b64(f"pem{n}", 64) for n in range(3)), "x" + _b64("pem-last", 23) + "==")
_PEM_EC = ("MHcCAQEEI" + _b64("ec0", 55), _b64("ec1", 64), _b64("ec2", 20) + "=")
AWS_SECRET = "kV7n/Qz2" + _b64("aws", 28).replace("+", "x") + "+Tq9"  # 40 chars of [A-Za-z0-9/+]
AWS_SECRET_2 = "Wb3r+Lm8" + _b64("aws2", 28).replace("/", "y") + "/Hp4"
WANDB_KEY = "3c7f0e2a9b5d4c1e8f6a0b2d4e6f8a1c3e5b7d9f"  # 40 hex, wandb's key format
WANDB_KEY_2 = "6e1b4f8a2c9d0e3f5a7b1c4d8e2f6a9b0c3d5e7f"

CORPUS: tuple[Planted, ...] = (
    Planted("wandb-env", ("+ env | grep WANDB", f"WANDB_API_KEY={WANDB_KEY}", "WANDB_PROJECT=flex"),
            (WANDB_KEY,), "WANDB_API_KEY=***"),
    Planted("wandb-login", (f"+ wandb login --relogin {WANDB_KEY_2}",), (WANDB_KEY_2,), "wandb login --relogin ***"),
    Planted("netrc-one-line", ("$ cat ~/.netrc", f"machine api.wandb.ai login user password {WANDB_KEY_2[::-1]}"),
            (WANDB_KEY_2[::-1],), "machine api.wandb.ai login user password ***"),
    Planted("netrc-multi-line", ("machine api.wandb.ai", "  login user", "  password Xk9mQ2vLp7Rt4Wz"),
            ("Xk9mQ2vLp7Rt4Wz",), "  login user"),
    Planted("hf-torchrun", ("+ torchrun --nproc_per_node 8 --nnodes 2 train.py --config cfg/flex7.yaml "
                            "--hf_token hf_aBcDeFgHiJkLmNoPqRsTuVwXyZ01234567 --bf16",),
            ("aBcDeFgHiJkLmNoPqRsTuVwXyZ01234567", "hf_aBcDeFgHiJkLmNoPqRsTuVwXyZ01234567"), "--bf16"),
    Planted("github-git-clone", ("+ git clone https://ghp_Ab12Cd34Ef56Gh78Ij90Kl12Mn34Op56Qr78@github.com/org/flex.git",
                                 "fatal: Authentication failed for 'https://github.com/org/flex.git/'"),
            ("Ab12Cd34Ef56Gh78Ij90Kl12Mn34Op56Qr78",), "@github.com/org/flex.git"),
    Planted("github-fine-grained", ("GH_TOKEN=github_pat_11ABCDEFG0aBcDeFgHiJkLmN_"
                                    "oPqRsTuVwXyZ0123456789aBcDeFgHiJkLmNoPqRsTuVwXyZ0123456789abcdefg",),
            ("11ABCDEFG0aBcDeFgHiJkLmN_oPqRsTuVwXyZ0123456789aBcDeFgHiJkLmNoPqRsTuVwXyZ0123456789abcdefg",)),
    Planted("token-only-url", ("+ pip install git+https://9a8b7c6d5e4f3a2b1c0d9e8f7a6b5c4d3e2f1a0b@github.com/org/pkg.git",
                               "  error: subprocess-exited-with-error"),
            ("9a8b7c6d5e4f3a2b1c0d9e8f7a6b5c4d3e2f1a0b",), "@github.com/org/pkg.git"),
    Planted("url-password-slash", ("sqlalchemy.exc.OperationalError: (psycopg2.OperationalError) connection to server failed: "
                                   "postgres://mlflow:p4ss/w0rd+Qx@db.internal:5432/mlflow",),
            ("p4ss/w0rd+Qx", "w0rd+Qx"), "postgres://mlflow:***@db.internal:5432/mlflow"),
    Planted("url-empty-user", ("requests.exceptions.ProxyError: HTTPSConnectionPool(host='huggingface.co', port=443): "
                               "Max retries exceeded with url: /api/models (Caused by ProxyError('Unable to connect to "
                               "proxy', https://:Sup3rS3cretPw@proxy.corp:3128))",),
            ("Sup3rS3cretPw",), "https://:***@proxy.corp:3128"),
    Planted("url-user-password", ("requests.exceptions.ConnectionError: HTTPSConnectionPool(host='minio.lab', port=9000): "
                                  "Max retries exceeded with url: https://ci-bot:Tr0ub4dor&3x@minio.lab:9000/ckpt/step_1200.pt",),
            ("Tr0ub4dor&3x",), "https://ci-bot:***@minio.lab:9000/ckpt/step_1200.pt"),
    Planted("pem-rsa", ("-----BEGIN RSA PRIVATE KEY-----", *_PEM, "-----END RSA PRIVATE KEY-----"),
            tuple(line.rstrip("=") for line in _PEM), "-----BEGIN RSA PRIVATE KEY-----"),
    Planted("pem-ec-prefixed", ("[rank0]: -----BEGIN EC PRIVATE KEY-----", *(f"[rank0]: {line}" for line in _PEM_EC),
                                "[rank0]: -----END EC PRIVATE KEY-----"),
            tuple(line.rstrip("=") for line in _PEM_EC), "[rank0]: -----END EC PRIVATE KEY-----"),
    Planted("password-word", ("INFO notify: logging in to smtp.lab.internal as alerts with password Zq8#mK2!vL9pW4xR",),
            ("Zq8#mK2!vL9pW4xR",), "as alerts with password ***"),
    Planted("api-key-flag", ("+ python upload_ckpt.py --bucket runs --api-key 5d41402abc4b2a76b9719d911017c592aa --step 1200",),
            ("5d41402abc4b2a76b9719d911017c592aa",), "--step 1200"),
    Planted("token-flag", ("+ comet upload --token 0f1e2d3c4b5a69788796a5b4c3d2e1f0 ./runs/flex7",),
            ("0f1e2d3c4b5a69788796a5b4c3d2e1f0",), "./runs/flex7"),
    Planted("lowercase-key", ('urllib3.connectionpool DEBUG https://api.lab.internal:443 "GET /v2/upload?key=AbC123xYz789QwE456'
                              '&run=flex7 HTTP/1.1" 403 61',), ("AbC123xYz789QwE456",), "&run=flex7"),
    Planted("lowercase-api-key-secret-token", ('    client = Client(api_key="a1b2c3d4e5f6a7b8c9d0", secret=\'Q7w8E9r0T1y2U3i4\', '
                                               'token=tK4eN9mQ2xL7vB3z)',),
            ("a1b2c3d4e5f6a7b8c9d0", "Q7w8E9r0T1y2U3i4", "tK4eN9mQ2xL7vB3z"), "client = Client("),
    Planted("aws-credentials", ("[default]", "aws_access_key_id = AKIAQ3EXAMPLEZ7K4T2B", f"aws_secret_access_key = {AWS_SECRET}"),
            ("Q3EXAMPLEZ7K4T2B", AWS_SECRET), "[default]"),
    Planted("aws-bare-near-id", ("Access key ID,Secret access key", f"AKIAZ9EXAMPLEQ1W2E3R,{AWS_SECRET_2}"),
            ("Z9EXAMPLEQ1W2E3R", AWS_SECRET_2), "Access key ID,Secret access key"),
    Planted("openai", ("openai.AuthenticationError: Error code: 401 - Incorrect API key provided: "
                       "sk-proj-7Hq2Lx9Vw3Mz8Kp4Rt6Yb1Nc5Df0Gs2AjT3BlbkFJ8Qw2Er4Ty6Ui8Op0As2Df",),
            ("7Hq2Lx9Vw3Mz8Kp4Rt6Yb1Nc5Df0Gs2AjT3BlbkFJ8Qw2Er4Ty6Ui8Op0As2Df",), "Incorrect API key provided: sk-"),
    Planted("slack-bot", ("slack_sdk.errors.SlackApiError: The request to the Slack API failed. (url: "
                          "https://slack.com/api/chat.postMessage) token xoxb-1234567890-1234567890123-AbCdEfGhIjKlMnOpQrStUvWx",),
            ("1234567890-1234567890123-AbCdEfGhIjKlMnOpQrStUvWx",), "token xoxb-***"),
    Planted("slack-webhook", ("POST https://hooks.slack.com/services/T0ABCDEFG/B0HIJKLMN/aBcDeFgHiJkLmNoPqRsTuVwX failed: 404",),
            ("T0ABCDEFG/B0HIJKLMN/aBcDeFgHiJkLmNoPqRsTuVwX", "aBcDeFgHiJkLmNoPqRsTuVwX"), "failed: 404"),
    Planted("jwt", ("requests.exceptions.HTTPError: 401 Client Error: Unauthorized for url: https://api.lab.internal/v1/runs?"
                    "id_token=eyJhbGciOiJSUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiJjaS1ib3QiLCJleHAiOjE3MDAwMDAwMDB9."
                    "c2lnbmF0dXJlLXBhcnQtMTIzNDU2Nzg5MGFiY2RlZg",),
            ("eyJzdWIiOiJjaS1ib3QiLCJleHAiOjE3MDAwMDAwMDB9", "c2lnbmF0dXJlLXBhcnQtMTIzNDU2Nzg5MGFiY2RlZg"),
            "Unauthorized for url: https://api.lab.internal/v1/runs?"),
    Planted("bearer-curl", ("+ curl -sf -H 'Authorization: Bearer 2f9cA81bE07d4F6a93c5B2e8D1f07A4c' "
                            "https://api.lab.internal/v1/heartbeat",),
            ("2f9cA81bE07d4F6a93c5B2e8D1f07A4c",), "https://api.lab.internal/v1/heartbeat"),
    Planted("google-api-key", ("google.api_core.exceptions.Forbidden: 403 GET https://storage.googleapis.com/storage/v1/b/runs"
                               "?key=AIzaSyD3x4mpl3K3yF0rT3st1ngPurp0s3sOnly",),
            ("SyD3x4mpl3K3yF0rT3st1ngPurp0s3sOnly",), "googleapis.com/storage/v1/b/runs"),
    Planted("gitlab", ("remote: HTTP Basic: Access denied for glpat-Xy7Zq2Wv9Ut4Sr1Pq8On",), ("Xy7Zq2Wv9Ut4Sr1Pq8On",),
            "Access denied for glpat-***"),
    Planted("stripe-pypi-npm", ("TWINE_PASSWORD not set; using token pypi-AgEIcHlwaS5vcmcCJDk0ZjA2NzY1LWI2ZTYtNGI2MS1iNmQ2LTlmNTAw"
                                "ZjYwZWE2YgACKlszLCJmZDI3",
                                "//registry.npmjs.org/:_authToken=npm_Ab12Cd34Ef56Gh78Ij90Kl12Mn34Op56Qr78",
                                "billing hook: sk_live_4eC39HqLyjWDarjtT1zdp7dc"),
            ("AgEIcHlwaS5vcmcCJDk0ZjA2NzY1LWI2ZTYtNGI2MS1iNmQ2LTlmNTAwZjYwZWE2YgACKlszLCJmZDI3",
             "Ab12Cd34Ef56Gh78Ij90Kl12Mn34Op56Qr78", "4eC39HqLyjWDarjtT1zdp7dc")),
)

ALL_SECRETS: tuple[str, ...] = tuple(secret for planted in CORPUS for secret in planted.secrets)
