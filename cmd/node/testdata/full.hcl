name = "report"

step "fetch" {
  pool           = "etl"
  kind           = "fetch"
  payload        = "{\"url\":\"https://example.com\"}"
  priority       = "high"
  labels         = { zone = "eu" }
  tags           = { traceparent = "00-1" }
  timeout        = "30s"
  max_attempts   = 3
  delay          = "1m"
  deadline       = "2030-01-03T00:00:00Z"
}

step "approve" {
  pool       = "ops"
  kind       = "approval"
  external   = true
  depends_on = ["fetch"]
}

step "publish" {
  pool              = "etl"
  kind              = "publish"
  payload_base64    = "AP8="
  run_at            = "2030-01-02T15:00:00Z"
  depends_on        = ["fetch", "approve"]
  dependency_policy = "done"
}
