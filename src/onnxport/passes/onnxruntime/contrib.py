"""The domain of ONNX Runtime's contrib operators, which the passes of this package emit."""

CONTRIB_DOMAIN = "com.microsoft"
