package attachments

import (
	"bytes"
	"fmt"
	"image"
	"image/gif"
	"image/jpeg"
	"image/png"
	"io"

	"golang.org/x/image/draw"
	"golang.org/x/image/webp"
)

// maxPixels bounds the images the server decodes to scale them: a small
// file can claim a huge picture, and decoding it would take gigabytes.
// Cameras make up to about 50 megapixels.
const maxPixels = 64 << 20

// maxImageBytes bounds an image block's data: the Messages API takes at
// most 5 MB of base64 per image, which is 3.75 MB of image.
const maxImageBytes = 3_750_000

// config reads an image's size without decoding it.
func config(mediaType string, r io.Reader) (image.Config, error) {
	switch mediaType {
	case "image/jpeg":
		return jpeg.DecodeConfig(r)
	case "image/png":
		return png.DecodeConfig(r)
	case "image/gif":
		return gif.DecodeConfig(r)
	case "image/webp":
		return webp.DecodeConfig(r)
	}
	return image.Config{}, fmt.Errorf("%s is not an image type the model takes", mediaType)
}

func decode(mediaType string, r io.Reader) (image.Image, error) {
	switch mediaType {
	case "image/jpeg":
		return jpeg.Decode(r)
	case "image/png":
		return png.Decode(r)
	case "image/gif":
		return gif.Decode(r) // the first frame
	case "image/webp":
		return webp.Decode(r)
	}
	return nil, fmt.Errorf("%s is not an image type the model takes", mediaType)
}

// checkImage refuses an image that cannot be read, or that is larger
// than the server decodes.
func checkImage(name, mediaType string, r io.Reader) error {
	cfg, err := config(mediaType, r)
	if err != nil {
		return fmt.Errorf("%w: %q is not a readable %s image (%v)", ErrMismatch, name, mediaType, err)
	}
	if int64(cfg.Width)*int64(cfg.Height) > maxPixels {
		return fmt.Errorf("%w: %q is %d×%d pixels; the server takes images of at most %d megapixels", ErrTooLarge, name,
			cfg.Width, cfg.Height, maxPixels>>20)
	}
	return nil
}

// fitImage is the image data as the model is sent it: as it is when its
// sides are at most edge pixels and it has at most maxBytes
// (maxImageBytes for an image block), otherwise scaled down (keeping its
// proportions) and encoded as JPEG, or PNG when it has transparency.
func fitImage(data []byte, mediaType string, edge, maxBytes int) ([]byte, string, error) {
	cfg, err := config(mediaType, bytes.NewReader(data))
	if err != nil {
		return nil, "", err
	}
	if cfg.Width <= edge && cfg.Height <= edge && len(data) <= maxBytes {
		return data, mediaType, nil
	}
	if int64(cfg.Width)*int64(cfg.Height) > maxPixels {
		return nil, "", fmt.Errorf("%w: the image is %d×%d pixels", ErrTooLarge, cfg.Width, cfg.Height)
	}
	src, err := decode(mediaType, bytes.NewReader(data))
	if err != nil {
		return nil, "", err
	}
	// A photo small enough in pixels may still be too many bytes: each
	// try makes it smaller.
	for try := 0; try < 6; try++ {
		w, h := fit(src.Bounds().Dx(), src.Bounds().Dy(), edge)
		dst := image.NewNRGBA(image.Rect(0, 0, w, h))
		draw.CatmullRom.Scale(dst, dst.Bounds(), src, src.Bounds(), draw.Src, nil)
		var buf bytes.Buffer
		outType := "image/jpeg"
		if dst.Opaque() {
			err = jpeg.Encode(&buf, dst, &jpeg.Options{Quality: 85})
		} else {
			outType = "image/png"
			err = png.Encode(&buf, dst)
		}
		if err != nil {
			return nil, "", err
		}
		if buf.Len() <= maxBytes {
			return buf.Bytes(), outType, nil
		}
		edge = max(w, h) * 3 / 4
	}
	return nil, "", fmt.Errorf("%w: the image stays over %d bytes when scaled down", ErrTooLarge, maxBytes)
}

// fit is w×h scaled down so that neither side is over edge.
func fit(w, h, edge int) (int, int) {
	if w <= edge && h <= edge {
		return w, h
	}
	if w >= h {
		return edge, max(1, h*edge/w)
	}
	return max(1, w*edge/h), edge
}
