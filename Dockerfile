# sluice container image: build on debian:bookworm, run on debian:bookworm-slim.
#
#   docker build -t sluice .
#   docker run --rm -p 8080:8080 -v "$PWD/my.yaml:/etc/sluice/sluice.yaml:ro" sluice
#   docker compose up --build          # with Redis and the demo backend (docker-compose.yml)
#
# The image carries conf/sluice.docker.yaml as /etc/sluice/sluice.yaml (Redis at redis:6379,
# upstream backend:8081, admin on 0.0.0.0:9901 inside the container); mount your own file there.

# ---------------------------------------------------------------------------------------
# Build stage: the same Debian packages as scripts/deps.sh, minus the test-only ones.
FROM debian:bookworm AS build

RUN apt-get update \
 && apt-get install -y --no-install-recommends \
      g++ make cmake pkg-config \
      libboost1.81-dev libhiredis-dev libyaml-cpp-dev libspdlog-dev libssl-dev libnghttp2-dev \
 && rm -rf /var/lib/apt/lists/*

WORKDIR /src
# Only what the build reads (tests/ is not needed with BUILD_TESTING=OFF).
COPY CMakeLists.txt ./
COPY cmake/ cmake/
COPY lua/ lua/
COPY src/ src/

# JOBS: parallel compile jobs (docker build --build-arg JOBS=8 .); 0 = one per CPU.
ARG JOBS=0
RUN jobs="${JOBS}"; [ "$jobs" -gt 0 ] || jobs="$(nproc)"; \
    cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DBUILD_TESTING=OFF \
 && cmake --build build -j"$jobs" \
 && strip --strip-unneeded build/sluice \
 && build/sluice --version

# ---------------------------------------------------------------------------------------
# Runtime stage: only the shared libraries the binary links (see `ldd build/sluice`):
# hiredis, yaml-cpp, spdlog, fmt and OpenSSL; and tzdata, which calendar quotas in a time
# zone read. Boost is not needed at run time: Asio and Beast are header-only here, compiled
# into the binary. libstdc++6, libgcc-s1 and libc6 are part of
# bookworm-slim already.
FROM debian:bookworm-slim

RUN apt-get update \
 && apt-get install -y --no-install-recommends \
      libhiredis0.14 libyaml-cpp0.7 libspdlog1.10 libfmt9 libssl3 libnghttp2-14 ca-certificates tzdata \
 && rm -rf /var/lib/apt/lists/* \
 && groupadd --system --gid 10001 sluice \
 && useradd --system --uid 10001 --gid sluice --no-create-home --home-dir /nonexistent \
      --shell /usr/sbin/nologin sluice

COPY --from=build /src/build/sluice /usr/local/bin/sluice
# The health check speaks HTTP through bash's /dev/tcp: no curl in the image.
COPY scripts/container_healthcheck.sh /usr/local/bin/sluice-healthcheck
COPY conf/sluice.docker.yaml /etc/sluice/sluice.yaml
RUN chmod 0755 /usr/local/bin/sluice /usr/local/bin/sluice-healthcheck \
 && chmod 0644 /etc/sluice/sluice.yaml \
 && sluice --check --no-resolve -c /etc/sluice/sluice.yaml

# Numeric, so that runtimes checking "runAsNonRoot" can tell it is not root.
USER 10001:10001

# 8080: proxied traffic. 9901: admin (/metrics /healthz /readyz /stats); publish it only
# where it should be reachable (docker-compose.yml binds it to the host's loopback).
EXPOSE 8080 9901

# /healthz on the admin port answers 200 while the process serves. The address must match
# admin.listen of the mounted config (a different port: override the health check).
HEALTHCHECK --interval=10s --timeout=3s --start-period=10s --retries=3 \
  CMD ["/usr/local/bin/sluice-healthcheck", "127.0.0.1:9901"]

# SIGTERM: graceful stop (stop accepting, finish in-flight requests for up to
# server.shutdown_timeout); give `docker stop -t` / stop_grace_period more than that.
# SIGHUP reloads the configuration: docker kill -s HUP CONTAINER.
STOPSIGNAL SIGTERM
ENTRYPOINT ["/usr/local/bin/sluice"]
CMD ["-c", "/etc/sluice/sluice.yaml"]
