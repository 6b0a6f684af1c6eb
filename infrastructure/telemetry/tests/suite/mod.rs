mod otlp;
