# The workflow of nightly.json, in HCL.
name = "nightly"

step "extract" {
  pool    = "etl"
  kind    = "extract"
  payload = "s3://x"
}

step "clean" {
  pool       = "etl"
  kind       = "clean"
  depends_on = ["extract"]
}

step "load" {
  pool              = "etl"
  kind              = "load"
  depends_on        = ["clean"]
  dependency_policy = "succeeded"
}
