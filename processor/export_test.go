package processor

// ExpireChunk is the bound on the gaps one transaction expires.
const ExpireChunk = expireChunk
