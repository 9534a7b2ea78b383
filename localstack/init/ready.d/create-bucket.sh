#!/bin/sh
# LocalStack init hook: create the bucket named in silt.env.
awslocal s3 mb s3://silt || true
