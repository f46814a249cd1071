"""Pre-signed URL vectors from botocore (an implementation independent of ours), for
crates/agentbus-gateway/tests/data/sigv4/presign.json:
  .venv-s3/bin/python tests/s3/sigv4_vectors.py > crates/agentbus-gateway/tests/data/sigv4/presign.json
"""
import datetime, json, sys
from unittest import mock
import botocore, botocore.auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

def presign(method, url, headers, when, expires, key_id, secret, region):
    creds = Credentials(key_id, secret)
    auth = botocore.auth.S3SigV4QueryAuth(creds, "s3", region, expires=expires)
    req = AWSRequest(method=method, url=url, headers=headers)
    with mock.patch("botocore.auth.get_current_datetime", return_value=when):
        auth.add_auth(req)
    return req.url

cases = []
KID, SECRET = "AKIAIOSFODNN7EXAMPLE", "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
for name, method, url, headers, when, expires, region in [
    ("aws_s3_doc_get_example", "GET", "https://examplebucket.s3.amazonaws.com/test.txt", {}, datetime.datetime(2013,5,24), 86400, "us-east-1"),
    ("put_binding_content_length_path_style", "PUT", "http://127.0.0.1:9000/agentbus-blobs/tenant-a/blb_01JZ8Q", {"content-length": "1048592"}, datetime.datetime(2026,12,1,23,5,9), 900, "eu-west-3"),
    ("put_binding_content_length_virtual_host", "PUT", "https://agentbus-blobs.s3.eu-west-3.amazonaws.com/prefix%20with%20space/blb_x", {"content-length": "16"}, datetime.datetime(2026,1,2,3,4,5), 900, "eu-west-3"),
]:
    signed = presign(method, url, headers, when, expires, KID, SECRET, region)
    cases.append({"name": name, "method": method, "url": url, "signed_headers": headers,
                  "date": when.strftime("%Y%m%dT%H%M%SZ"), "expires_s": expires, "region": region,
                  "access_key_id": KID, "secret_access_key": SECRET, "presigned": signed})
json.dump({"generator": f"botocore {botocore.__version__} S3SigV4QueryAuth (tests/s3/requirements.txt), except the first case, which is also the example of AWS's S3 API reference, 'Authenticating Requests: Using Query Parameters'", "cases": cases}, sys.stdout, indent=2)
print()
