# cursor-oai container: a static binary, a CA bundle and a non-root user on scratch.
#
#   docker build -t cursor-oai .
#   docker run -p 127.0.0.1:18741:18741 -e CURSOR_OAI_API_KEY=... -v cursor-oai:/config cursor-oai
#
# Both architectures in one image, from an x86-64 machine and without emulation: the build
# stage runs on the build machine's platform and cross-compiles for each target
# (./build.sh arm64: Debian's aarch64 cross compiler with musl for arm64), and the final
# scratch stage is made per target:
#   docker buildx build --platform linux/amd64,linux/arm64 -t NAME --push .
#
# Where no registry is reachable, build a bookworm base locally and pass it in
# (tests/docker.sh does exactly this):
#   debootstrap --variant=minbase bookworm rootfs http://deb.debian.org/debian
#   tar -C rootfs -c . | docker import - local/bookworm
#   docker build --build-arg BUILDER_IMAGE=local/bookworm -t cursor-oai .

ARG BUILDER_IMAGE=debian:bookworm
# Set by BuildKit; the classic builder (DOCKER_BUILDKIT=0) leaves it empty, and then the build
# stage is linux/amd64, where that builder runs it anyway.
ARG BUILDPLATFORM

FROM --platform=${BUILDPLATFORM:-linux/amd64} ${BUILDER_IMAGE} AS build
# Lets tests/docker.sh remove exactly its own leftover builder-stage images.
LABEL org.cursor-oai.stage=build
# The architecture of the image being built (amd64, arm64); empty with the classic builder,
# which builds for its own machine.
ARG TARGETARCH
# build.sh (run as root) installs the Debian packages it needs, ca-certificates among them,
# and fetches the pinned dependency sources from Debian's archive.
WORKDIR /src
COPY . /src
RUN host=$(dpkg --print-architecture) \
 && case "${TARGETARCH:-$host}" in \
      "$host") ./build.sh && bin=build/cursor-oai ;; \
      arm64) ./build.sh arm64 && bin=build/cursor-oai-arm64 ;; \
      *) echo "cursor-oai: cannot build for ${TARGETARCH} on $host" \
              "(cross builds: linux/arm64 from amd64)" >&2; exit 1 ;; \
    esac \
 && mkdir -p /out/etc/ssl/certs /out/config /out/tmp \
 && cp "$bin" /out/cursor-oai \
 && cp /etc/ssl/certs/ca-certificates.crt /out/etc/ssl/certs/ca-certificates.crt \
 && printf 'cursor-oai:x:10001:10001:cursor-oai:/config:/cursor-oai\n' > /out/etc/passwd \
 && printf 'cursor-oai:x:10001:\n' > /out/etc/group \
 && chown 10001:10001 /out/config && chmod 0700 /out/config && chmod 1777 /out/tmp

FROM scratch
COPY --from=build /out/ /
USER 10001:10001
# Credentials live in the /config volume (auth.json, mode 0600), or come from
# CURSOR_ACCESS_TOKEN. Listening on all interfaces requires CURSOR_OAI_API_KEY.
ENV XDG_CONFIG_HOME=/config \
    HOME=/config \
    SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt \
    CURSOR_OAI_LISTEN=0.0.0.0:18741
VOLUME ["/config"]
WORKDIR /config
EXPOSE 18741
ENTRYPOINT ["/cursor-oai"]
CMD ["serve"]
