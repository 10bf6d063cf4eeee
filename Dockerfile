# Two images from one build: the manager (caplb) and the node agent alone (caplb-agent, smaller:
# it does not link controller-runtime). Build with --target manager or --target agent.
FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN CGO_ENABLED=0 go build -trimpath -o /out/caplb ./cmd/caplb && \
    CGO_ENABLED=0 go build -trimpath -o /out/caplb-agent ./cmd/caplb-agent

FROM gcr.io/distroless/static-debian12:nonroot AS manager
COPY --from=build /out/caplb /caplb
ENTRYPOINT ["/caplb", "manager"]

# The agent runs as root with NET_ADMIN and NET_RAW only (config/agent/). It is one static binary:
# it programs nftables over netlink itself (no `nft`, no shell, nothing else in the image).
FROM gcr.io/distroless/static-debian12 AS agent
COPY --from=build /out/caplb-agent /caplb-agent
ENTRYPOINT ["/caplb-agent"]
