# One image runs either component:
#   operator: node dist/operator/main.js      proxy: node dist/proxy/main.js
# The Helm chart sets the command. Build: docker build -t platform-ai-optimizer .
# NODE_IMAGE: any Debian trixie image with Node.js 24 and npm in PATH (CI builds one from
# debootstrap and the npm registry: e2e/image/build.sh).
ARG NODE_IMAGE=node:24-trixie-slim

# Build: compile TypeScript. No install script runs (whatever the base's npm does with allowScripts):
# nothing native is compiled, better-sqlite3 13 ships Node-API binaries and loads them.
FROM ${NODE_IMAGE} AS build
WORKDIR /app
COPY package.json package-lock.json ./
RUN npm ci --ignore-scripts
COPY tsconfig.json tsconfig.build.json ./
COPY crds ./crds
COPY operator ./operator
COPY proxy ./proxy
RUN npm run build && npm ci --omit=dev --ignore-scripts

# Run: production dependencies and compiled output only, as an unprivileged user.
FROM ${NODE_IMAGE}
ENV NODE_ENV=production
WORKDIR /app
COPY --from=build /app/node_modules ./node_modules
COPY --from=build /app/dist ./dist
COPY package.json ./
USER 10001:10001
EXPOSE 8080
CMD ["node", "dist/proxy/main.js"]
